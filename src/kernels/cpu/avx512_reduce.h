// Horizontal sums of AVX-512 accumulators for kernels compiled with AVX-512 target attributes
// (always inlined into them).
// GCC 12 falsely flags the intrinsic headers' undefined-vector idiom in target-attribute
// functions (its bug 105593); the warning is about the header, not this file.
#pragma once
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "kernels/cpu/unroll.h"

namespace tensorpar {

// out[i] = _mm512_reduce_add_ps(v[i]) for i < 8, all eight at once: the same sums in the same
// tree (GCC's: lanes i and i + 8, then i and i + 4 of those, then i and i + 2, then i and i + 1),
// formed by swapping halves between vectors instead of shrinking each alone (24 shuffles and
// adds where eight reductions took 64, and one store instead of eight).
__attribute__((target("avx512f"), always_inline)) inline __m256 reduce_add_8(const __m512 (&v)[8]) {
  __m512 p[4], q[2];
  TP_UNROLL for (int k = 0; k < 4; ++k)  // vectors 2k, 2k + 1: lanes i + (i + 8) in each half
    p[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  TP_UNROLL for (int k = 0; k < 2; ++k)  // 128-bit lane c holds vector 4k + c: i + (i + 4)
    q[k] = _mm512_add_ps(_mm512_shuffle_f32x4(p[2 * k], p[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(p[2 * k], p[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  // lane c: vector c's i + (i + 2) for i = 0, 1, then vector c + 4's
  const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(q[0], q[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(q[0], q[1], _MM_SHUFFLE(3, 2, 3, 2)));
  // lane c: vector c's sum, vector c + 4's sum (twice)
  const __m512 t = _mm512_add_ps(_mm512_shuffle_ps(r, r, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(r, r, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 13, 9, 5, 1, 12, 8, 4, 0);
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, t));
}

}  // namespace tensorpar
#pragma GCC diagnostic pop
