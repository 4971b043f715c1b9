#include "kernels/cpu/half_convert.h"

#include <bit>

#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/quant_matmul_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
// GCC's AVX-512 conversion intrinsics start from _mm512_undefined_*, which it reports as
// possibly uninitialized (a false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#define TP_HALF_AVX512 1
#endif

namespace tensorpar {

namespace {

#ifdef TP_HALF_AVX512
constexpr int kNearestNoExceptions = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

bool avx512_usable() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

__attribute__((target("avx512f"))) void to_f32_avx512(float* dst, const f16* src, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

__attribute__((target("avx512f"))) void to_f16_avx512(f16* dst, const float* src, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), kNearestNoExceptions));
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

// AVX2 with FMA and F16C, read from CPUID by the quantized kernels' check (clang's
// __builtin_cpu_supports has no "f16c"); every AVX2 CPU has F16C.
bool f16c_usable() {
  static const bool has = quant_detail::cpu_has_avx2();
  return has;
}

__attribute__((target("avx,f16c"))) void to_f32_f16c(float* dst, const f16* src, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

__attribute__((target("avx,f16c"))) void to_f16_f16c(f16* dst, const float* src, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kNearestNoExceptions));
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}
#endif

// f32_to_bf16 (core/half.h) without its branch, so that the loop vectorizes: round to nearest
// even, NaNs kept quiet.
inline uint16_t bf16_bits_of(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded);
}

}  // namespace

TP_VECTOR_CLONES void bf16_to_f32_n(float* dst, const bf16* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(uint32_t(src[i].bits) << 16);
}

TP_VECTOR_CLONES void f32_to_bf16_n(bf16* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i].bits = bf16_bits_of(src[i]);
}

void f16_to_f32_n(float* dst, const f16* src, int64_t n) {
#ifdef TP_HALF_AVX512
  if (avx512_usable()) return to_f32_avx512(dst, src, n);
  if (f16c_usable()) return to_f32_f16c(dst, src, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void f32_to_f16_n(f16* dst, const float* src, int64_t n) {
#ifdef TP_HALF_AVX512
  if (avx512_usable()) return to_f16_avx512(dst, src, n);
  if (f16c_usable()) return to_f16_f16c(dst, src, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

}  // namespace tensorpar
