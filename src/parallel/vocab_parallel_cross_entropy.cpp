// Vocab-parallel cross-entropy, composed from the row-wise kernel pieces with two all-reduces
// (see vocab_parallel_cross_entropy.h).
#include "parallel/vocab_parallel_cross_entropy.h"

#include <limits>
#include <span>
#include <vector>

#include "core/error.h"

namespace tensorpar {
namespace {

int64_t check_args(const Tensor& logits_local, const Tensor& targets, Range vocab_range,
                   int64_t vocab, const char* where) {
  TP_CHECK(vocab >= 1 && vocab_range.begin >= 0 && vocab_range.begin <= vocab_range.end &&
               vocab_range.end <= vocab,
           "[", where, "] vocab range: got ", range_str(vocab_range), " of ", vocab,
           ", expected inside [0, ", vocab, ")");
  TP_CHECK(logits_local.dtype() == DType::kF32 && logits_local.is_contiguous() &&
               logits_local.ndim() == 2 && logits_local.dim(1) == vocab_range.size(),
           "[", where, "] logits_local: got ", logits_local.describe(),
           ", expected contiguous f32 (N, ", vocab_range.size(), ") for vocab columns ",
           range_str(vocab_range));
  const int64_t n = logits_local.dim(0);
  TP_CHECK(targets.dtype() == DType::kI64 && targets.is_contiguous() && targets.numel() == n,
           "[", where, "] targets: got ", targets.describe(), ", expected contiguous i64 [", n,
           "]");
  return n;
}

void check_row_vector(const Tensor& t, int64_t n, const char* where, const char* name) {
  TP_CHECK(t.dtype() == DType::kF32 && t.is_contiguous() && t.numel() == n, "[", where, "] ",
           name, ": got ", t.describe(), ", expected contiguous f32 [", n, "]");
}

}  // namespace

float vocab_parallel_cross_entropy_forward(Tensor* losses, Tensor& lse, const Tensor& logits_local,
                                           const Tensor& targets, Range vocab_range, int64_t vocab,
                                           Communicator& tp, const CrossEntropyOptions& opt) {
  const char* where = "vocab_parallel_cross_entropy_forward";
  const int64_t n = check_args(logits_local, targets, vocab_range, vocab, where);
  check_row_vector(lse, n, where, "lse");
  if (losses) check_row_vector(*losses, n, where, "losses");
  const bool smoothing = opt.label_smoothing != 0.0f;
  const int64_t v_local = vocab_range.size();
  const float* logits = n > 0 ? logits_local.data<float>() : nullptr;
  const int64_t* tgt = n > 0 ? targets.data<int64_t>() : nullptr;

  // Global row max. A rank with no vocab columns contributes -inf.
  std::vector<float> row_max(size_t(n), -std::numeric_limits<float>::infinity());
  if (v_local > 0 && n > 0) cross_entropy_local_max(row_max.data(), logits, n, v_local);
  if (n > 0) tp.all_reduce(std::span<float>(row_max), ReduceOp::kMax);

  // [sum_exp | target_logit | logit_sum] in one buffer, one all-reduce SUM.
  std::vector<float> parts(size_t(3 * n), 0.0f);
  float* sum_exp = parts.data();
  float* target_logit = parts.data() + n;
  float* logit_sum = parts.data() + 2 * n;
  if (n > 0) {
    if (v_local > 0) cross_entropy_local_sum_exp(sum_exp, logits, row_max.data(), n, v_local);
    if (v_local > 0) {
      cross_entropy_local_target_logit(target_logit, smoothing ? logit_sum : nullptr, logits, tgt,
                                       n, vocab_range.begin, v_local, vocab, opt);
    } else {  // no columns here (vocab < tp): contribute zeros, still validate the targets
      for (int64_t i = 0; i < n; ++i)
        TP_CHECK(tgt[i] == opt.ignore_index || (tgt[i] >= 0 && tgt[i] < vocab), "[", where,
                 "] targets[", i, "]: got ", tgt[i], ", expected in [0, ", vocab,
                 ") or the ignore index ", opt.ignore_index);
    }
    tp.all_reduce(std::span<float>(parts.data(), size_t(smoothing ? 3 * n : 2 * n)),
                  ReduceOp::kSum);
  }
  return cross_entropy_loss_from_parts(losses ? losses->data<float>() : nullptr,
                                       n > 0 ? lse.data<float>() : nullptr, row_max.data(),
                                       sum_exp, target_logit, smoothing ? logit_sum : nullptr, tgt,
                                       n, vocab, opt);
}

void vocab_parallel_cross_entropy_backward(Tensor& d_logits_local, float d_loss,
                                           const Tensor& logits_local, const Tensor& lse,
                                           const Tensor& targets, Range vocab_range, int64_t vocab,
                                           const CrossEntropyOptions& opt) {
  const char* where = "vocab_parallel_cross_entropy_backward";
  const int64_t n = check_args(logits_local, targets, vocab_range, vocab, where);
  check_row_vector(lse, n, where, "lse");
  TP_CHECK(d_logits_local.dtype() == DType::kF32 && d_logits_local.is_contiguous() &&
               d_logits_local.shape() == logits_local.shape(),
           "[", where, "] d_logits_local: got ", d_logits_local.describe(), ", expected f32",
           shape_str(logits_local.shape()));
  if (n == 0 || vocab_range.size() == 0) return;
  const int64_t count = cross_entropy_count(targets.data<int64_t>(), n, opt.ignore_index);
  if (count == 0) return;
  cross_entropy_grad_local(d_logits_local.data<float>(), logits_local.data<float>(),
                           lse.data<float>(), targets.data<int64_t>(), d_loss / float(count), n,
                           vocab_range.begin, vocab_range.size(), vocab, opt);
}

}  // namespace tensorpar
