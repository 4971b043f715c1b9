// ParallelMlp (see parallel_mlp.h).
#include "parallel/parallel_mlp.h"

#include "core/error.h"
#include "kernels/cpu/activations.h"
#include "parallel/mappings.h"

namespace tensorpar {

namespace {

// Views of the first N rows of a persistent (rows >= N, cols) buffer, reallocated only to grow.
Tensor rows_view(Tensor& buf, int64_t N, int64_t cols) {
  if (buf.ndim() != 2 || buf.dim(1) != cols || buf.dim(0) < N || buf.dtype() != DType::kF32)
    buf = Tensor::empty({N, cols}, DType::kF32);
  return buf.dim(0) == N ? buf : buf.slice(0, 0, N);
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
    : kind_(kind),
      gate_(hidden, ffn, bias, ffn_ranges, tp_rank),
      up_(hidden, ffn, bias, ffn_ranges, tp_rank),
      down_(ffn, hidden, bias, ffn_ranges, tp_rank) {}

int64_t ParallelMlp::weight_bytes() const {
  auto lin = [](const Tensor& w, const Tensor& b) { return w.nbytes() + (b.ndim() > 0 ? b.nbytes() : 0); };
  int64_t n = lin(up_.weight(), up_.bias()) + lin(down_.weight(), down_.bias());
  if (kind_ == MlpKind::kSwiGlu) n += lin(gate_.weight(), gate_.bias());
  return n;
}

void ParallelMlp::zero_grad() {
  gate_.zero_grad();
  up_.zero_grad();
  down_.zero_grad();
}

void ParallelMlp::forward(MatmulEngine& eng, Tensor& out, const Tensor& x, MlpActs& acts, Communicator& tp) const {
  TP_CHECK(x.ndim() == 2, "[ParallelMlp::forward] x: got ", x.describe(), ", expected (N, C)");
  const int64_t N = x.dim(0), Fl = ffn_local();
  Tensor pre = rows_view(acts.pre, N, Fl);
  Tensor h = rows_view(acts.h, N, Fl);
  up_.forward(eng, pre, x);
  if (kind_ == MlpKind::kSwiGlu) {
    Tensor gate = rows_view(acts.gate, N, Fl);
    gate_.forward(eng, gate, x);
    swiglu_forward(h.data<float>(), gate.data<float>(), pre.data<float>(), N * Fl);
  } else {
    gelu_tanh_forward(h.data<float>(), pre.data<float>(), N * Fl);
  }
  down_.forward(eng, out, h, tp);
}

void ParallelMlp::backward(MatmulEngine& eng, Tensor& d_x, const Tensor& d_out, const Tensor& x, const MlpActs& acts,
                           Communicator& tp) {
  const int64_t N = x.dim(0), Fl = ffn_local();
  auto saved = [&](const Tensor& t) {
    TP_CHECK(t.ndim() == 2 && t.dim(0) >= N && t.dim(1) == Fl, "[ParallelMlp::backward] saved activation ",
             t.describe(), ", expected ", shape_str({N, Fl}), " (forward with the same N)");
    return t.slice(0, 0, N);
  };
  const Tensor pre = saved(acts.pre), h = saved(acts.h);
  const Tensor gate = kind_ == MlpKind::kSwiGlu ? saved(acts.gate) : Tensor();
  Tensor d_h = Tensor::zeros({N, Fl}, DType::kF32);
  down_.backward(eng, &d_h, d_out, h);
  Tensor d_pre = Tensor::zeros({N, Fl}, DType::kF32);
  d_x.fill_zero();
  if (kind_ == MlpKind::kSwiGlu) {
    Tensor d_gate = Tensor::zeros({N, Fl}, DType::kF32);
    swiglu_backward(d_gate.data<float>(), d_pre.data<float>(), d_h.data<float>(), gate.data<float>(),
                    pre.data<float>(), N * Fl);
    gate_.backward_partial(eng, &d_x, d_gate, x);
  } else {
    gelu_tanh_backward(d_pre.data<float>(), d_h.data<float>(), pre.data<float>(), N * Fl);
  }
  up_.backward_partial(eng, &d_x, d_pre, x);
  copy_to_tp_region_backward(d_x, tp);
}

}  // namespace tensorpar
