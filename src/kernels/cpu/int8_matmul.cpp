// The int8-activation matmul (see int8_matmul.h): the activations' 8-bit rounding into the layout
// int8_matmul_driver.h describes, the choice of kernels (AVX-512 VNNI, else AVX2), and the naive
// reference.
#include "kernels/cpu/int8_matmul.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/int8_matmul_driver.h"
#include "kernels/cpu/int8_packed.h"
#include "kernels/cpu/parallel_if.h"
#include "kernels/cpu/quant_matmul_kernels.h"

namespace tensorpar {

using namespace int8_detail;

namespace {

bool has_kernel(DType t) {
  switch (t) {
    case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1: case DType::kQ8_0:
    case DType::kIQ4_NL: case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K:
      return true;
    case DType::kQ4_0x8: case DType::kQ4_1x8: case DType::kQ5_0x8: case DType::kQ5_1x8: case DType::kQ8_0x8:
    case DType::kIQ4_NLx8: case DType::kQ4_Kx8: case DType::kQ5_Kx8: case DType::kQ6_Kx8:
      return true;
    default:
      return false;
  }
}

ActLayout act_layout(int64_t K, DType t) {
  ActLayout l;
  l.k = K;
  l.kp = round_up(std::max<int64_t>(K, 1), kChunk);
  if (dtype_is_kquant(t)) {
    const int64_t nsb = l.kp / kKQuantBlock + 1;
    l.off_a = l.kp;
    l.off_b = l.off_a + round_up(nsb * 4, 64);
    l.off_c = l.off_b + l.kp;  // kp / 4 lanes of int32
    l.off_d = l.off_c + round_up(nsb * 8 * 4, 64);
    l.row_bytes = l.off_d + round_up(nsb * 16 * 4, 64);
  } else {
    const int64_t lanes = l.kp / 4;
    l.off_a = l.kp;
    l.off_b = l.off_a + lanes * 4;
    l.off_c = l.off_b + lanes * 4;
    l.off_d = l.off_c + lanes * 4;
    l.row_bytes = l.off_d + round_up(l.kp / kQuantBlock * 4, 64);
  }
  return l;
}

}  // namespace

namespace {

// The rounding rule of int8_quantize_activations (inlined into the vectorised callers below).
inline void quantize_blocks(const float* x, int64_t n, DType weight_type, int8_t* q, float* block_scales) {
  if (dtype_is_kquant(weight_type)) {
    for (int64_t b = 0; b < n / kKQuantBlock; ++b) {
      const float* xb = x + b * kKQuantBlock;
      float amax = 0.0f, max = 0.0f;
      for (int i = 0; i < kKQuantBlock; ++i)
        if (std::fabs(xb[i]) > amax) amax = std::fabs(xb[i]), max = xb[i];
      int8_t* qb = q + b * kKQuantBlock;
      if (amax == 0.0f) {
        std::memset(qb, 0, kKQuantBlock);
        block_scales[b] = 0.0f;
        continue;
      }
      const float iscale = -127.0f / max;
      for (int i = 0; i < kKQuantBlock; ++i)
        qb[i] = int8_t(std::min(127, int(std::nearbyint(iscale * xb[i]))));
      block_scales[b] = 1.0f / iscale;
    }
    return;
  }
  for (int64_t b = 0; b < n / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    // The largest magnitude as the largest bit pattern without the sign (non-negative floats
    // order as their bits do), an integer maximum that vectorises; a NaN makes the block's scale
    // NaN, so it reaches the output.
    uint32_t amax_bits = 0;
    for (int i = 0; i < kQuantBlock; ++i) amax_bits = std::max(amax_bits, std::bit_cast<uint32_t>(xb[i]) & 0x7fffffffu);
    const float amax = std::bit_cast<float>(amax_bits);
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < kQuantBlock; ++i) q[b * kQuantBlock + i] = int8_t(std::nearbyint(xb[i] * id));
    block_scales[b] = f16_to_f32(f32_to_f16(d));
  }
}

}  // namespace

TP_VECTOR_CLONES void int8_quantize_activations(const float* x, int64_t n, DType weight_type, int8_t* q,
                                                float* block_scales) {
  quantize_blocks(x, n, weight_type, q, block_scales);
}

namespace {

// One input row into its layout (dst: row_bytes, zero-padded). Compiled per instruction set: the
// rounding (std::nearbyint) is one instruction from SSE4.1 on and a libm call before it.
TP_VECTOR_CLONES void quantize_row_into(const float* x, const ActLayout& l, DType t, char* dst) {
  std::memset(dst, 0, size_t(l.row_bytes));
  auto* q = reinterpret_cast<int8_t*>(dst);
  if (dtype_is_kquant(t)) {
    const int64_t nsb = l.k / kKQuantBlock;
    auto* d = reinterpret_cast<float*>(dst + l.off_a);
    auto* corr = reinterpret_cast<int32_t*>(dst + l.off_b);
    auto* s32 = reinterpret_cast<int32_t*>(dst + l.off_c);
    auto* s16 = reinterpret_cast<int32_t*>(dst + l.off_d);
    quantize_blocks(x, l.k, t, q, d);
    for (int64_t b = 0; b < nsb; ++b)
      for (int g = 0; g < 16; ++g) {
        int32_t s = 0;
        for (int i = 0; i < 16; ++i) s += q[b * kKQuantBlock + g * 16 + i];
        s32[b * 8 + g / 2] += s;
        s16[b * 16 + g] = s;
        for (int lane = 0; lane < 4; ++lane) {  // Q6_K's codes are q + 32
          const int64_t i0 = b * kKQuantBlock + g * 16 + lane * 4;
          corr[i0 / 4] = -32 * (q[i0] + q[i0 + 1] + q[i0 + 2] + q[i0 + 3]);
        }
      }
    return;
  }
  const int64_t nb = l.k / kQuantBlock;
  auto* dx = reinterpret_cast<float*>(dst + l.off_a);
  auto* corr = reinterpret_cast<int32_t*>(dst + l.off_b);
  auto* sx = reinterpret_cast<float*>(dst + l.off_c);
  auto* qsum = reinterpret_cast<int32_t*>(dst + l.off_d);
  const float* scales = sx;  // block b's scale sits in sx[b] until sx[b] is written below
  quantize_blocks(x, l.k, t, q, sx);
  const int offset = legacy_offset(t);
  for (int64_t b = 0; b < nb; ++b) {
    int32_t sum = 0;
    for (int lane = 0; lane < 8; ++lane) {
      int32_t s4 = 0;
      for (int i = 0; i < 4; ++i) s4 += q[b * kQuantBlock + lane * 4 + i];
      sum += s4;
      dx[b * 8 + lane] = scales[b];
      corr[b * 8 + lane] = -offset * s4;
    }
    sx[b] = scales[b] * float(sum);
    qsum[b] = sum;
  }
}

bool runs(Int8Kernel k) {
  static const bool vnni512 = quant_detail::cpu_has_avx512() && __builtin_cpu_supports("avx512dq") &&
                              __builtin_cpu_supports("avx512vnni");
  static const bool avx2 = quant_detail::cpu_has_avx2();
  return k == Int8Kernel::kVnni512 ? vnni512 : avx2;
}

void check_operands(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias, const char* where) {
  const DType t = weight.dtype();
  TP_CHECK((dtype_is_quantized(t) || dtype_is_row_packed(t)) && weight.ndim() == 2 && weight.strides()[1] == 1 &&
               weight.dim(1) % dtype_block_elems(t) == 0 && weight.strides()[0] % dtype_block_elems(t) == 0,
           "[", where, "] weight: got ", weight.describe(),
           ", expected a 2-D block-quantized tensor with whole contiguous blocks per row");
  TP_CHECK(in.ndim() == 2 && in.dtype() == DType::kF32 && in.dim(1) == weight.dim(1) && in.strides()[1] == 1, "[",
           where, "] in: got ", in.describe(), ", expected f32 (M,", weight.dim(1), ") with unit column stride");
  TP_CHECK(out.ndim() == 2 && out.dtype() == DType::kF32 && out.dim(0) == in.dim(0) && out.dim(1) == weight.dim(0) &&
               out.strides()[1] == 1,
           "[", where, "] out: got ", out.describe(), ", expected f32 (", in.dim(0), ",", weight.dim(0),
           ") with unit column stride");
  TP_CHECK(!bias || (bias->ndim() == 1 && bias->dim(0) == weight.dim(0) && bias->dtype() == DType::kF32 &&
                     bias->is_contiguous()),
           "[", where, "] bias: got ", bias ? bias->describe() : "", ", expected contiguous f32[", weight.dim(0), "]");
}

}  // namespace

const std::vector<Int8Kernel>& int8_matmul_kernels() {
  static const std::vector<Int8Kernel> kernels = [] {  // the CPU does not change: asked once per matmul
    std::vector<Int8Kernel> out;
    for (Int8Kernel k : {Int8Kernel::kVnni512, Int8Kernel::kAvx2})
      if (runs(k)) out.push_back(k);
    return out;
  }();
  return kernels;
}

const char* int8_kernel_name(Int8Kernel k) { return k == Int8Kernel::kVnni512 ? "vnni512" : "avx2"; }

bool int8_matmul_usable(DType t) { return has_kernel(t) && !int8_matmul_kernels().empty(); }

bool int8_packed_rows_preferred(DType t) {
  if (!int8_packable(t)) return false;
  // Measured (docs/BENCHMARKS.md): the AVX2 Q6_K kernel packed is no faster at one row and slower
  // in prefill (each group of input rows unpacks the 6-bit codes again); the AVX-512 VNNI kernels
  // have no packed K-quant form.
  if (runs(Int8Kernel::kVnni512)) return !dtype_is_kquant(t);
  return runs(Int8Kernel::kAvx2) && t != DType::kQ6_K;
}

int64_t int8_matmul_scratch_bytes(int64_t M, int64_t K, DType t) {
  return std::max<int64_t>(M, 1) * act_layout(K, dtype_unpacked(t)).row_bytes;
}

void int8_matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias, void* scratch) {
  const std::vector<Int8Kernel>& kernels = int8_matmul_kernels();
  TP_CHECK(!kernels.empty(), "[int8_matmul_forward] no int8 kernel on this CPU (needs AVX2 with FMA and F16C)");
  int8_matmul_forward(out, in, weight, bias, scratch, kernels.front());
}

void int8_matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias, void* scratch,
                         Int8Kernel kernel) {
  check_operands(out, in, weight, bias, "int8_matmul_forward");
  const bool packed = dtype_is_row_packed(weight.dtype());
  const DType t = dtype_unpacked(weight.dtype());
  TP_CHECK(has_kernel(t), "[int8_matmul_forward] no int8 kernel for ", dtype_name(t), " weights");
  TP_CHECK(runs(kernel), "[int8_matmul_forward] this CPU cannot run the ", int8_kernel_name(kernel), " kernel");
  TP_CHECK(reinterpret_cast<uintptr_t>(scratch) % 64 == 0, "[int8_matmul_forward] scratch must be 64-byte aligned");
  const int64_t M = in.dim(0), K = in.dim(1), be = dtype_block_elems(t);
  if (out.numel() == 0) return;
  Operands o;
  o.l = act_layout(K, t);
  o.w = static_cast<const char*>(weight.raw());
  o.ldw = weight.strides()[0] / be * dtype_block_bytes(t);
  o.n = weight.dim(0);
  o.nb = K / be;
  o.act = static_cast<const char*>(scratch);
  o.m = M;
  o.out = out.data<float>();
  o.ldo = out.strides()[0];
  o.bias = bias ? bias->data<float>() : nullptr;
  const float* x = in.data<float>();
  const int64_t ldx = in.strides()[0];
  char* act = static_cast<char*>(scratch);
  parallel_if(M * K > (int64_t(1) << 16), [&] {
#pragma omp for schedule(static)
    for (int64_t m = 0; m < M; ++m) quantize_row_into(x + m * ldx, o.l, t, act + m * o.l.row_bytes);
  });
  // Row-packed K-quants have the AVX2 kernel only (on an AVX-512 CPU too).
  if (packed && kernel == Int8Kernel::kVnni512 && !dtype_is_kquant(t)) run_packed_vnni512(o, t);
  else if (packed) run_packed_avx2(o, t);
  else if (kernel == Int8Kernel::kVnni512) run_vnni512(o, t);
  else run_avx2(o, t);
}

void int8_matmul_reference(Tensor& out, const Tensor& in, const Tensor& given, const Tensor* bias) {
  check_operands(out, in, given, bias, "int8_matmul_reference");
  const Tensor weight = dtype_is_row_packed(given.dtype()) ? int8_unpack_rows(given) : given;
  const DType t = weight.dtype();
  TP_CHECK(has_kernel(t), "[int8_matmul_reference] no int8 rule for ", dtype_name(t), " weights");
  const int64_t M = in.dim(0), K = in.dim(1), N = weight.dim(0), be = dtype_block_elems(t);
  const int64_t ldw = weight.strides()[0] / be * dtype_block_bytes(t);
  const int64_t block = dtype_is_kquant(t) ? kKQuantBlock : kQuantBlock;
  std::vector<float> w(static_cast<size_t>(K)), xd(static_cast<size_t>(K)), scales(static_cast<size_t>(K / block + 1));
  std::vector<int8_t> q(static_cast<size_t>(K));
  for (int64_t m = 0; m < M; ++m) {
    int8_quantize_activations(in.data<float>() + m * in.strides()[0], K, t, q.data(), scales.data());
    for (int64_t i = 0; i < K; ++i) xd[size_t(i)] = scales[size_t(i / block)] * float(q[size_t(i)]);
    for (int64_t n = 0; n < N; ++n) {
      dequantize_row(w.data(), static_cast<const char*>(weight.raw()) + n * ldw, t, K);
      double s = bias ? double(bias->data<float>()[n]) : 0.0;
      for (int64_t i = 0; i < K; ++i) s += double(w[size_t(i)]) * double(xd[size_t(i)]);
      out.data<float>()[m * out.strides()[0] + n] = float(s);
    }
  }
}

}  // namespace tensorpar
