// The operands both bf16-activation matmuls take (amx_matmul.h, avx512bf16_matmul.h), checked
// once: in (M,K) f32, weight (N,K) bf16, bias (N) f32 or null, out (M,N) f32, unit column strides,
// and a 64-byte aligned scratch.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace tensorpar {

struct Bf16Operands {
  const float* x;
  int64_t ldx;
  const uint16_t* w;
  int64_t ldw;
  const float* bias;
  float* out;
  int64_t ldo;
  int64_t M, N, K;
};

// Throws Error naming `who` and the operand that does not fit.
inline Bf16Operands check_bf16_operands(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias,
                                        const void* scratch, const char* who) {
  TP_CHECK(in.ndim() == 2 && in.dtype() == DType::kF32 && in.strides()[1] == 1, "[", who, "] in: got ",
           in.describe(), ", expected f32 (M,K) with unit column stride");
  TP_CHECK(weight.ndim() == 2 && weight.dtype() == DType::kBF16 && weight.strides()[1] == 1 &&
               weight.dim(1) == in.dim(1),
           "[", who, "] weight: got ", weight.describe(), ", expected bf16 (N,", in.dim(1), ") with unit column stride");
  TP_CHECK(out.ndim() == 2 && out.dtype() == DType::kF32 && out.strides()[1] == 1 && out.dim(0) == in.dim(0) &&
               out.dim(1) == weight.dim(0),
           "[", who, "] out: got ", out.describe(), ", expected f32 (", in.dim(0), ",", weight.dim(0), ")");
  TP_CHECK(!bias || (bias->ndim() == 1 && bias->dim(0) == weight.dim(0) && bias->dtype() == DType::kF32 &&
                     bias->is_contiguous()),
           "[", who, "] bias: got ", bias ? bias->describe() : "", ", expected f32[", weight.dim(0), "]");
  TP_CHECK(!scratch || reinterpret_cast<uintptr_t>(scratch) % 64 == 0, "[", who, "] scratch must be 64-byte aligned");
  return {in.data<float>(), in.strides()[0], static_cast<const uint16_t*>(weight.raw()), weight.strides()[0],
          bias ? bias->data<float>() : nullptr, out.data<float>(), out.strides()[0], in.dim(0), weight.dim(0),
          in.dim(1)};
}

inline int64_t round_up_to(int64_t v, int64_t to) {
  return (v + to - 1) / to * to;
}

}  // namespace tensorpar
