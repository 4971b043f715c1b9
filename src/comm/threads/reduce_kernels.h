// The element-wise reductions behind all_reduce and reduce_scatter of the threads backend:
// a fixed left-to-right order over the sources (so every rank computes bitwise the same), f32
// arithmetic for bf16/f16 rounded once at the end, and the result stored into several outputs.
#pragma once

#include <cstdint>

#include "comm/communicator.h"

namespace tensorpar::threads {

// For every i in [begin, end): v = srcs[0][i] op srcs[1][i] op ... op srcs[n_src-1][i], stored
// into dsts[d][i] for every d < n_dst. Buffers hold `dtype` elements; a dst may alias a src (each
// chunk is read completely before it is written). AVX-512 when the CPU has it, else portable.
// `stream`: write the outputs with non-temporal stores (for messages much larger than the caches).
void reduce_range(DType dtype, ReduceOp op, const void* const* srcs, int n_src, void* const* dsts,
                  int n_dst, int64_t begin, int64_t end, bool stream = false);

// The naive reference (one element at a time, core/half.h conversions): the oracle in tests.
void reduce_range_naive(DType dtype, ReduceOp op, const void* const* srcs, int n_src,
                        void* const* dsts, int n_dst, int64_t begin, int64_t end);

namespace detail {
// The two compiled variants; reduce_range picks one by CPU features.
void reduce_range_portable(DType dtype, ReduceOp op, const void* const* srcs, int n_src,
                           void* const* dsts, int n_dst, int64_t begin, int64_t end, bool stream);
void reduce_range_avx512(DType dtype, ReduceOp op, const void* const* srcs, int n_src,
                         void* const* dsts, int n_dst, int64_t begin, int64_t end, bool stream);
}  // namespace detail

}  // namespace tensorpar::threads
