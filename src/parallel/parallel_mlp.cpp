// ParallelMlp (see parallel_mlp.h).
#include "parallel/parallel_mlp.h"

#include "core/error.h"
#include "kernels/cpu/activations.h"
#include "parallel/mappings.h"

namespace tensorpar {

namespace {

std::vector<ColumnPart> in_parts(int64_t ffn, MlpKind kind, const std::vector<Range>& ranges) {
  std::vector<ColumnPart> parts{ColumnPart{ffn, ranges}};
  if (kind != MlpKind::kGeluTanh) parts.push_back(ColumnPart{ffn, ranges});
  return parts;
}

}  // namespace

std::vector<Range> mlp_ffn_ranges(int64_t ffn, int tp_size, int64_t align) {
  if (align <= 1 || ffn % align != 0) return partition_even_all(ffn, tp_size);
  std::vector<Range> r = partition_even_all(ffn / align, tp_size);
  for (Range& x : r) x = {x.begin * align, x.end * align};
  return r;
}

ParallelMlp::ParallelMlp(int64_t hidden, int64_t ffn, MlpKind kind, bool bias, std::vector<Range> ffn_ranges,
                         int tp_rank)
    : kind_(kind), in_(hidden, in_parts(ffn, kind, ffn_ranges), bias, tp_rank), down_(ffn, hidden, bias, ffn_ranges, tp_rank) {}

int64_t ParallelMlp::weight_bytes() const {
  return in_.weight_bytes() + down_.weight().nbytes() + (down_.has_bias() ? down_.bias().nbytes() : 0);
}

void ParallelMlp::zero_grad() {
  in_.zero_grad();
  down_.zero_grad();
}

void ParallelMlp::allocate_grads() {
  ensure_grad(in_.d_weight(), {in_.out_local(), in_.in_features()});
  if (in_.has_bias()) ensure_grad(in_.d_bias(), {in_.out_local()});
  ensure_grad(down_.d_weight(), down_.weight().shape());
  if (down_.has_bias()) ensure_grad(down_.d_bias(), {down_.out_features()});
}

Tensor ParallelMlp::activate(MatmulEngine& eng, const Tensor& x, MlpActs& acts) const {
  TP_CHECK(x.ndim() == 2, "[ParallelMlp::forward] x: got ", x.describe(), ", expected (N, C)");
  const int64_t N = x.dim(0), Fl = ffn_local();
  Tensor pre = scratch_rows(acts.pre, N, in_.out_local());
  Tensor h = scratch_rows(acts.h, N, Fl);
  in_.forward(eng, pre, x);
  if (kind_ == MlpKind::kSwiGlu)
    swiglu_rows_forward(h.data<float>(), pre.data<float>(), N, Fl);
  else if (kind_ == MlpKind::kGeGlu)
    geglu_rows_forward(h.data<float>(), pre.data<float>(), N, Fl);
  else
    gelu_tanh_forward(h.data<float>(), pre.data<float>(), N * Fl);
  return h;
}

void ParallelMlp::forward(MatmulEngine& eng, Tensor& out, const Tensor& x, MlpActs& acts, Communicator& tp) const {
  down_.forward(eng, out, activate(eng, x, acts), tp);
}

void ParallelMlp::forward_partial(MatmulEngine& eng, Tensor& out, const Tensor& x, MlpActs& acts) const {
  down_.forward_partial(eng, out, activate(eng, x, acts));
}

Tensor ParallelMlp::d_pre(MatmulEngine& eng, const Tensor& d_out, const Tensor& x, const MlpActs& acts) {
  const int64_t N = x.dim(0), Fl = ffn_local();
  auto saved = [&](const Tensor& t, int64_t cols) {
    TP_CHECK(t.ndim() == 2 && t.dim(0) >= N && t.dim(1) == cols, "[ParallelMlp::backward] saved activation ",
             t.describe(), ", expected ", shape_str({N, cols}), " (forward with the same N)");
    return t.slice(0, 0, N);
  };
  const Tensor pre = saved(acts.pre, in_.out_local()), h = saved(acts.h, Fl);
  Tensor d_h = Tensor::zeros({N, Fl}, DType::kF32);
  down_.backward(eng, &d_h, d_out, h);
  Tensor d_pre = Tensor::zeros(pre.shape(), DType::kF32);
  if (kind_ == MlpKind::kSwiGlu)
    swiglu_rows_backward(d_pre.data<float>(), d_h.data<float>(), pre.data<float>(), N, Fl);
  else if (kind_ == MlpKind::kGeGlu)
    geglu_rows_backward(d_pre.data<float>(), d_h.data<float>(), pre.data<float>(), N, Fl);
  else
    gelu_tanh_backward(d_pre.data<float>(), d_h.data<float>(), pre.data<float>(), N * Fl);
  return d_pre;
}

void ParallelMlp::backward(MatmulEngine& eng, Tensor& d_x, const Tensor& d_out, const Tensor& x, const MlpActs& acts,
                           Communicator& tp, CommThread* async) {
  in_.backward(eng, d_x, d_pre(eng, d_out, x, acts), x, tp, async);
}

void ParallelMlp::backward_partial(MatmulEngine& eng, Tensor& d_x, const Tensor& d_out, const Tensor& x,
                                   const MlpActs& acts, const std::function<void()>& input_done) {
  const Tensor d = d_pre(eng, d_out, x, acts);
  if (!input_done) {
    in_.backward_partial(eng, &d_x, d, x);
    return;
  }
  in_.backward_input(eng, d_x, d, x);
  input_done();
  in_.backward_weight(eng, d, x);
}

}  // namespace tensorpar
