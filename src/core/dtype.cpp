#include "core/dtype.h"

#include "core/checked_math.h"
#include "core/error.h"

namespace tensorpar {

int64_t dtype_block_elems(DType t) { return dtype_is_quantized(t) ? 32 : 1; }

int64_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
    case DType::kQ8_0: return 34;
    case DType::kQ4_0: return 18;
    case DType::kQ4_1: return 20;
  }
  TP_ASSERT(false, "unknown dtype");
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
    case DType::kQ8_0: return "q8_0";
    case DType::kQ4_0: return "q4_0";
    case DType::kQ4_1: return "q4_1";
  }
  return "?";
}

DType dtype_from_name(std::string_view name) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU8,
                  DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    if (dtype_name(t) == name) return t;
  }
  TP_CHECK(false, "[dtype_from_name] unknown dtype '", name,
           "', expected one of f32 bf16 f16 i32 i64 u8 q8_0 q4_0 q4_1");
  return DType::kF32;
}

int64_t dtype_nbytes(DType t, int64_t n) {
  const int64_t blk = dtype_block_elems(t);
  TP_CHECK(n >= 0 && n % blk == 0, "[dtype_nbytes] ", n, " elements of ", dtype_name(t),
           " is not a whole number of ", blk, "-element blocks");
  return checked_mul(n / blk, dtype_block_bytes(t), "dtype_nbytes");
}

}  // namespace tensorpar
