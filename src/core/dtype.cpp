#include "core/dtype.h"

#include "core/checked_math.h"
#include "core/error.h"

namespace tensorpar {

namespace {

constexpr DType kAll[] = {DType::kF32,  DType::kBF16,   DType::kF16,  DType::kI32,  DType::kI64,
                          DType::kU8,   DType::kQ8_0,   DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                          DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                          DType::kQ5_K, DType::kQ6_K};

}  // namespace

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU8:
      return "u8";
    case DType::kQ8_0:
      return "q8_0";
    case DType::kQ4_0:
      return "q4_0";
    case DType::kQ4_1:
      return "q4_1";
    case DType::kQ5_0:
      return "q5_0";
    case DType::kQ5_1:
      return "q5_1";
    case DType::kIQ4_NL:
      return "iq4_nl";
    case DType::kQ2_K:
      return "q2_k";
    case DType::kQ3_K:
      return "q3_k";
    case DType::kQ4_K:
      return "q4_k";
    case DType::kQ5_K:
      return "q5_k";
    case DType::kQ6_K:
      return "q6_k";
    case DType::kQ8_0x8:
      return "q8_0x8";
    case DType::kQ4_0x8:
      return "q4_0x8";
    case DType::kQ4_1x8:
      return "q4_1x8";
    case DType::kQ5_0x8:
      return "q5_0x8";
    case DType::kQ5_1x8:
      return "q5_1x8";
    case DType::kIQ4_NLx8:
      return "iq4_nlx8";
    case DType::kQ4_Kx8:
      return "q4_kx8";
    case DType::kQ5_Kx8:
      return "q5_kx8";
    case DType::kQ6_Kx8:
      return "q6_kx8";
    case DType::kBF16x64:
      return "bf16x64";
    case DType::kF16x64:
      return "f16x64";
    case DType::kF32x64:
      return "f32x64";
  }
  return "?";
}

DType dtype_from_name(std::string_view name) {
  for (DType t : kAll) {
    if (dtype_name(t) == name) return t;
  }
  TP_CHECK(false, "[dtype_from_name] unknown dtype '", name,
           "', expected one of f32 bf16 f16 i32 i64 u8 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl q2_k q3_k "
           "q4_k q5_k q6_k");
  return DType::kF32;
}

int64_t dtype_nbytes(DType t, int64_t n) {
  const int64_t blk = dtype_block_elems(t);
  TP_CHECK(n >= 0 && n % blk == 0, "[dtype_nbytes] ", n, " elements of ", dtype_name(t),
           " is not a whole number of ", blk, "-element blocks");
  return checked_mul(n / blk, dtype_block_bytes(t), "dtype_nbytes");
}

}  // namespace tensorpar
