// Fused softmax + cross-entropy over logits (N,V) with integer targets (N): an ignore index
// (rows that contribute nothing), mean over the other rows, optional label smoothing.
// The row-wise pieces are public so that a vocab-parallel version (logits sharded along V) can
// be composed from them with all-reduces in between:
//   local_max -> all-reduce MAX -> local_sum_exp -> all-reduce SUM;
//   local_target_logit (and logit_sum with smoothing) -> all-reduce SUM;
//   loss_from_parts (same on every rank) -> grad_local (local, no communication).
#pragma once

#include <cstdint>

namespace tensorpar {

struct CrossEntropyOptions {
  int64_t ignore_index = -100;  // rows with this target contribute no loss and no gradient
  float label_smoothing = 0;    // target distribution (1-s) onehot + s/V, V the GLOBAL vocab
};

// Rows whose target is not ignore_index.
int64_t cross_entropy_count(const int64_t* targets, int64_t N, int64_t ignore_index);

// losses (N) per row (0 for ignored rows; may be nullptr); lse (N) the row log-sum-exp saved
// for backward (may be nullptr when no backward follows); logits (N,V); targets (N), each in [0,V)
// or ignore_index (else throws). Returns the mean loss over non-ignored rows (0 when every row is
// ignored).
float cross_entropy_forward(float* losses, float* lse, const float* logits, const int64_t* targets,
                            int64_t N, int64_t V, const CrossEntropyOptions& opt = {});
// d_logits (N,V) += (softmax - smoothed onehot) * d_loss / count for non-ignored rows; lse (N)
// from the forward.
void cross_entropy_backward(float* d_logits, float d_loss, const float* logits, const float* lse,
                            const int64_t* targets, int64_t N, int64_t V,
                            const CrossEntropyOptions& opt = {});

// ---- Pieces. logits_local (N,V_local) holds the global vocab columns [v_begin, v_begin+V_local).

// row_max (N) = max over the local columns of each row.
void cross_entropy_local_max(float* row_max, const float* logits_local, int64_t N, int64_t V_local);
// row_sum_exp (N) = sum over the local columns of exp(x - row_max), row_max the GLOBAL max.
void cross_entropy_local_sum_exp(float* row_sum_exp, const float* logits_local,
                                 const float* row_max, int64_t N, int64_t V_local);
// target_logit (N) = the logit of the row's target if this shard owns it, else 0 (so a SUM over
// shards gives the target logit); logit_sum (N) (nullptr unless label smoothing is used) = sum of
// the local logits. Targets outside [0, V_global) other than ignore_index throw.
void cross_entropy_local_target_logit(float* target_logit, float* logit_sum,
                                      const float* logits_local, const int64_t* targets, int64_t N,
                                      int64_t v_begin, int64_t V_local, int64_t V_global,
                                      const CrossEntropyOptions& opt);
// From the global (all-reduced) pieces: losses (N), lse (N) = max + log(sum) (either may be
// nullptr);
// logit_sum may be nullptr when label_smoothing == 0. Returns the mean loss over non-ignored rows.
float cross_entropy_loss_from_parts(float* losses, float* lse, const float* row_max,
                                    const float* row_sum_exp, const float* target_logit,
                                    const float* logit_sum, const int64_t* targets, int64_t N,
                                    int64_t V_global, const CrossEntropyOptions& opt);
// d_logits_local (N,V_local) += (exp(x - lse) - smoothed onehot) * scale for non-ignored rows;
// lse (N) the global log-sum-exp; scale is d_loss / count (count over all ranks' rows if the
// mean spans several).
void cross_entropy_grad_local(float* d_logits_local, const float* logits_local, const float* lse,
                              const int64_t* targets, float scale, int64_t N, int64_t v_begin,
                              int64_t V_local, int64_t V_global, const CrossEntropyOptions& opt);

}  // namespace tensorpar
