// cuda_check, nccl_check and the DType -> ncclDataType_t mapping.
#include "comm/nccl/nccl_check.h"

#include "core/error.h"

namespace tensorpar::nccl {

void cuda_check(cudaError_t rc, std::string_view where) {
  if (rc == cudaSuccess) [[likely]]
    return;
  throw Error(detail::concat("[", where, "] CUDA error ", int(rc), " (", cudaGetErrorName(rc),
                             "): ", cudaGetErrorString(rc)));
}

void nccl_check(ncclResult_t rc, std::string_view where) {
  if (rc == ncclSuccess) [[likely]]
    return;
  const char* last = ncclGetLastError(nullptr);
  throw Error(detail::concat("[", where, "] NCCL error ", int(rc), ": ", ncclGetErrorString(rc),
                             last && *last ? " (" : "", last ? last : "", last && *last ? ")" : ""));
}

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

}  // namespace tensorpar::nccl
