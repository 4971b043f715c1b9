// Batch-invariant matmul (see rowwise_matmul.h). Each dot product accumulates K in chunks of 16
// lanes (one accumulator vector per (weight row, input row) pair), then reduces the 16 lanes in a
// fixed tree; the register blocking (up to 4 weight rows x 4 input rows) only decides which dots
// run side by side, not how any one of them is summed.
// GCC 12 falsely flags the intrinsic headers' undefined-vector idiom in target-attribute
// functions (its bug 105593); the warning is about the header, not this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/cpu/rowwise_matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu/quant_matmul_kernels.h"

namespace tensorpar {

namespace {

constexpr int kLanes = 16;
constexpr int kWRows = 4;  // weight rows per register block
constexpr int kXRows = 4;  // input rows per register block

struct Operands {
  const float* x;
  int64_t ldx;
  const void* w;
  int64_t ldw;  // elements between weight rows
  DType wt;
  const float* bias;
  float* out;
  int64_t ldo;
  int64_t M, N, K;
};

Operands check(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias) {
  TP_CHECK(in.ndim() == 2 && in.dtype() == DType::kF32 && in.strides()[1] == 1, "[rowwise_matmul_forward] in: got ",
           in.describe(), ", expected f32 (M,K) with unit column stride");
  const DType wt = weight.dtype();
  TP_CHECK(weight.ndim() == 2 && (wt == DType::kF32 || wt == DType::kBF16 || wt == DType::kF16) &&
               weight.strides()[1] == 1 && weight.dim(1) == in.dim(1),
           "[rowwise_matmul_forward] weight: got ", weight.describe(), ", expected f32/bf16/f16 (N,", in.dim(1),
           ") with unit column stride");
  TP_CHECK(out.ndim() == 2 && out.dtype() == DType::kF32 && out.strides()[1] == 1 && out.dim(0) == in.dim(0) &&
               out.dim(1) == weight.dim(0),
           "[rowwise_matmul_forward] out: got ", out.describe(), ", expected f32 (", in.dim(0), ",", weight.dim(0),
           ")");
  TP_CHECK(!bias || (bias->ndim() == 1 && bias->dim(0) == weight.dim(0) && bias->dtype() == DType::kF32 &&
                     bias->is_contiguous()),
           "[rowwise_matmul_forward] bias: got ", bias ? bias->describe() : "", ", expected f32[", weight.dim(0), "]");
  return {in.data<float>(), in.strides()[0], weight.raw(), weight.strides()[0], wt,
          bias ? bias->data<float>() : nullptr, out.data<float>(), out.strides()[0], in.dim(0), weight.dim(0),
          in.dim(1)};
}

// ---- portable: lane arrays the compiler may vectorize; the arithmetic order is the source's ----

inline float load_w(const void* w, DType t, int64_t i) {
  if (t == DType::kF32) return static_cast<const float*>(w)[i];
  if (t == DType::kBF16) return bf16_to_f32(static_cast<const bf16*>(w)[i]);
  return f16_to_f32(static_cast<const f16*>(w)[i]);
}

// The fixed lane reduction both paths share: pairwise halving 16 -> 8 -> 4 -> 2 -> 1.
inline float reduce16(float* a) {
  for (int width = kLanes / 2; width >= 1; width /= 2)
    for (int i = 0; i < width; ++i) a[i] = a[i] + a[i + width];
  return a[0];
}

float dot_portable(const float* x, const void* w, DType t, int64_t K) {
  float acc[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = std::fma(load_w(w, t, k + l), x[k + l], acc[l]);
  for (int l = 0; k + l < K; ++l) acc[l] = std::fma(load_w(w, t, k + l), x[k + l], acc[l]);
  return reduce16(acc);
}

// ---- AVX-512 ----

#define TP_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

TP_AVX512 inline __m512 load_w16(const void* w, DType t, int64_t k, __mmask16 mask) {
  if (t == DType::kF32) return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(w) + k);
  const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(w) + k);
  if (t == DType::kBF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

TP_AVX512 inline float reduce512(__m512 v) {
  alignas(64) float a[kLanes];
  _mm512_store_ps(a, v);
  return reduce16(a);
}

template <int WR, int XR>
TP_AVX512 void block512(const Operands& o, int64_t n0, int64_t m0) {
  __m512 acc[WR][XR];
  for (int i = 0; i < WR; ++i)
    for (int j = 0; j < XR; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t es = dtype_nbytes(o.wt, 1);
  const char* wbase = static_cast<const char*>(o.w) + n0 * o.ldw * es;
  for (int64_t k = 0; k < o.K; k += kLanes) {
    const __mmask16 mask = o.K - k >= kLanes ? __mmask16(0xffff) : __mmask16((1u << (o.K - k)) - 1);
    __m512 xv[XR];
    for (int j = 0; j < XR; ++j) xv[j] = _mm512_maskz_loadu_ps(mask, o.x + (m0 + j) * o.ldx + k);
    for (int i = 0; i < WR; ++i) {
      const __m512 wv = load_w16(wbase + i * o.ldw * es, o.wt, k, mask);
      for (int j = 0; j < XR; ++j) acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < WR; ++i)
    for (int j = 0; j < XR; ++j) {
      const float b = o.bias ? o.bias[n0 + i] : 0.0f;
      o.out[(m0 + j) * o.ldo + n0 + i] = reduce512(acc[i][j]) + b;
    }
}

template <int WR>
TP_AVX512 void rows512(const Operands& o, int64_t n0) {
  int64_t m0 = 0;
  for (; m0 + kXRows <= o.M; m0 += kXRows) block512<WR, kXRows>(o, n0, m0);
  switch (o.M - m0) {
    case 1: block512<WR, 1>(o, n0, m0); break;
    case 2: block512<WR, 2>(o, n0, m0); break;
    case 3: block512<WR, 3>(o, n0, m0); break;
    default: break;
  }
}

TP_AVX512 void run_avx512(const Operands& o) {
  const int64_t blocks = (o.N + kWRows - 1) / kWRows;
#pragma omp parallel for schedule(static) if (o.N * o.K * std::max<int64_t>(1, o.M) > (int64_t(1) << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t n0 = b * kWRows;
    switch (std::min<int64_t>(kWRows, o.N - n0)) {
      case 1: rows512<1>(o, n0); break;
      case 2: rows512<2>(o, n0); break;
      case 3: rows512<3>(o, n0); break;
      default: rows512<4>(o, n0); break;
    }
  }
}

void run_portable(const Operands& o) {
  const int64_t es = dtype_nbytes(o.wt, 1);
#pragma omp parallel for schedule(static) if (o.N * o.K * std::max<int64_t>(1, o.M) > (int64_t(1) << 16))
  for (int64_t n = 0; n < o.N; ++n) {
    const void* wrow = static_cast<const char*>(o.w) + n * o.ldw * es;
    const float b = o.bias ? o.bias[n] : 0.0f;
    for (int64_t m = 0; m < o.M; ++m) o.out[m * o.ldo + n] = dot_portable(o.x + m * o.ldx, wrow, o.wt, o.K) + b;
  }
}

}  // namespace

void rowwise_matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias) {
  const Operands o = check(out, in, weight, bias);
  if (o.M == 0 || o.N == 0) return;
  if (quant_detail::cpu_has_avx512())
    run_avx512(o);
  else
    run_portable(o);
}

void rowwise_matmul_forward_portable(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias) {
  const Operands o = check(out, in, weight, bias);
  if (o.M == 0 || o.N == 0) return;
  run_portable(o);
}

}  // namespace tensorpar
