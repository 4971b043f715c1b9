// Causal self-attention with grouped-query heads (GQA; MQA when NKV = 1, MHA when NKV = NH)
// over a KV cache. One layout serves inference and training: per sequence, k and v hold rows
// (T_kv, NKV, HS) for positions 0.. (the cache, with room to spare), and the T query tokens sit
// at positions [pos0, pos0 + T), so query t sees keys [0, pos0 + t] (with a sliding window W,
// only the last W of them: Gemma's local layers). Training is pos0 = 0, T_kv = T. Query head h
// reads kv head h / (NH / NKV).
#pragma once

#include <cstdint>

namespace tensorpar {

struct AttentionDims {
  int64_t B = 1;     // sequences
  int64_t T = 0;     // query tokens per sequence
  int64_t NH = 0;    // query heads
  int64_t NKV = 0;   // kv heads; NH must be a multiple of NKV
  int64_t HS = 0;    // head size
  int64_t pos0 = 0;  // position of the first query token (tokens already in the cache)
  int64_t T_kv = 0;  // rows per sequence in k and v (cache capacity), >= pos0 + T; 0 = pos0 + T
  float scale = 0;   // score scale; 0 = 1/sqrt(HS)
  int64_t window = 0;  // sliding window: the query at position p sees keys (p - window, p]; 0 = all
};

// out (B,T,NH,HS); lse (B,NH,T) the log-sum-exp of each row's scaled scores, saved for backward
// (nullptr at inference); q (B,T,NH,HS); k, v (B,T_kv,NKV,HS) with rows [0, pos0+T) filled.
// Tiled: a block of queries of all heads of one kv group against blocks of keys, with an online
// softmax (running max and sum), so each key block is read once per query block. Parallel over
// (sequence, kv head, query block).
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const AttentionDims& d);
// The reference: one query row at a time, full score row, then softmax. Same arguments.
void attention_forward_naive(float* out, float* lse, const float* q, const float* k, const float* v,
                             const AttentionDims& d);
// d_q (B,T,NH,HS), d_k, d_v (B,T_kv,NKV,HS) accumulate (+=); d_k/d_v rows are summed over the
// query heads of their group and only rows [0, pos0+T) are touched. d_out, q, out (B,T,NH,HS);
// k, v (B,T_kv,NKV,HS); lse (B,NH,T) from the forward. Probabilities are recomputed from lse
// (nothing of size T^2 is stored). Any of d_q, d_k, d_v may be nullptr to skip it.
// Deterministic: d_q is parallel over query blocks and d_k/d_v over key blocks, each summed in a
// fixed order. Tiled like the forward.
void attention_backward(float* d_q, float* d_k, float* d_v, const float* d_out, const float* q,
                        const float* k, const float* v, const float* out, const float* lse,
                        const AttentionDims& d);
// The reference: one query row (for d_q) or one key row (for d_k, d_v) at a time.
void attention_backward_naive(float* d_q, float* d_k, float* d_v, const float* d_out,
                              const float* q, const float* k, const float* v, const float* out,
                              const float* lse, const AttentionDims& d);

}  // namespace tensorpar
