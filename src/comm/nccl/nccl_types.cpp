// DType -> ncclDataType_t and ReduceOp -> ncclRedOp_t.
#include "comm/nccl/nccl_types.h"

#include "core/error.h"

namespace tensorpar::nccl {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kU8: return ncclUint8;
    default: break;
  }
  TP_CHECK(false, "[nccl] dtype ", dtype_name(dtype),
           " cannot be communicated: expected f32, bf16, f16, i32, i64 or u8");
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  TP_CHECK(false, "[nccl] reduce op ", int(op), " is not a ReduceOp: expected sum, max or min");
  return ncclSum;
}

}  // namespace tensorpar::nccl
