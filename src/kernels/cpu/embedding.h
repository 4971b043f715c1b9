// Token embedding lookup (forward) and its scatter-add gradient (backward), plus the masked
// variant a vocab-parallel embedding uses: each rank holds the rows [v_begin, v_end) of the
// table and writes zeros for ids it does not own (an all-reduce then completes the lookup).
#pragma once

#include <cstdint>

namespace tensorpar {

// out (N,C) = table (V,C)[ids (N)]. An id outside [0, V) throws, naming the id and position.
void embedding_forward(float* out, const int64_t* ids, const float* table, int64_t N, int64_t V,
                       int64_t C);
// d_table (V,C) += scatter of d_out (N,C) rows by ids (N). Deterministic: each thread owns a
// block of columns and walks the rows in order.
void embedding_backward(float* d_table, const float* d_out, const int64_t* ids, int64_t N,
                        int64_t V, int64_t C);

// Masked lookup for a vocab shard: table_local (v_end - v_begin, C) holds global rows
// [v_begin, v_end). out (N,C) row n = table_local[ids[n] - v_begin] if the id is in range,
// else zeros. Negative ids throw.
void embedding_forward_masked(float* out, const int64_t* ids, const float* table_local, int64_t N,
                              int64_t v_begin, int64_t v_end, int64_t C);
// d_table_local (v_end - v_begin, C) += d_out rows whose ids fall in [v_begin, v_end); the
// other rows are ignored.
void embedding_backward_masked(float* d_table_local, const float* d_out, const int64_t* ids,
                               int64_t N, int64_t v_begin, int64_t v_end, int64_t C);

}  // namespace tensorpar
