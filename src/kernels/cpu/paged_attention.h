// Causal GQA attention at inference over a paged KV cache: keys and values live in fixed-size
// blocks of a pool shared by many sequences, and each sequence names its blocks in a block
// table (token at position p sits in block blocks[p / block_size], row p % block_size). One call
// serves a whole engine step: every sequence's query rows (a decode row or a prefill chunk) at
// their own positions. Each query row is computed by the same arithmetic whatever else is in the
// call (scores of keys 0..pos in order, then their softmax and weighted sum in order), so
// results are batch-invariant: bitwise equal for a row alone or among others, for a prompt run
// whole or in chunks, and for any block size.
#pragma once

#include <cstdint>
#include <span>

#include "core/half.h"

namespace tensorpar {

struct PagedAttentionDims {
  int64_t NH = 0;          // query heads
  int64_t NKV = 0;         // kv heads; NH a multiple of NKV (query head h reads kv head h / (NH/NKV))
  int64_t HS = 0;          // head size
  int64_t block_size = 0;  // tokens per block
  float scale = 0;         // 0: 1/sqrt(HS)
  int64_t window = 0;      // sliding window: position p sees keys (p - window, p]; 0 = all
};

// The query rows of one sequence: rows [row_begin, row_begin + T) of q/out, at positions
// [pos0, pos0 + T); blocks cover positions [0, pos0 + T) (the keys of these rows included).
struct PagedSeq {
  int64_t row_begin = 0;
  int64_t T = 0;
  int64_t pos0 = 0;
  const int32_t* blocks = nullptr;
  int64_t n_blocks = 0;
};

// out (N,NH,HS) for the rows of seqs; q (N,NH,HS); k_pool (blocks, NKV, HS, block_size): each
// block's keys transposed, so a block's scores are block_size independent lanes; v_pool
// (blocks, block_size, NKV, HS).
// Parallel over (group of up to 8 consecutive rows of a sequence, kv head).
void paged_attention_forward(float* out, const float* q, const float* k_pool, const float* v_pool,
                             std::span<const PagedSeq> seqs, const PagedAttentionDims& d);
// The reference: gathers each sequence's keys into contiguous rows and runs
// attention_forward_naive (attention.h).
void paged_attention_forward_naive(float* out, const float* q, const float* k_pool, const float* v_pool,
                                   std::span<const PagedSeq> seqs, const PagedAttentionDims& d);

// The same over pools of f16 keys and values (half the memory), with llama.cpp's f16 cache
// numerics: the query is rounded to f16 too (ggml multiplies an f16 cache with the query in its
// type), scores, softmax and the weighted sum in f32. Bitwise the result of the f32 kernel on
// the f16 values widened and the query rounded to f16 (each work item widens the keys and values
// it reads into a scratch of its own, then runs the f32 arithmetic; a decode step split by the
// team widens each vector in a register as it loads it, where the CPU has AVX2 and F16C).
void paged_attention_forward_f16(float* out, const float* q, const f16* k_pool, const f16* v_pool,
                                 std::span<const PagedSeq> seqs, const PagedAttentionDims& d);
void paged_attention_forward_f16_naive(float* out, const float* q, const f16* k_pool, const f16* v_pool,
                                       std::span<const PagedSeq> seqs, const PagedAttentionDims& d);

}  // namespace tensorpar
