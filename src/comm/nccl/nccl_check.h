// Checked wrappers for the CUDA runtime and NCCL: a failed call becomes a
// tensorpar::Error carrying the library's own message.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <string_view>

#include "core/dtype.h"

namespace tensorpar::nccl {

// Throws Error("[where] CUDA error N (name): text") unless rc == cudaSuccess.
void cuda_check(cudaError_t rc, std::string_view where);
// Throws Error("[where] NCCL error N: text (last: ncclGetLastError)") unless rc == ncclSuccess.
void nccl_check(ncclResult_t rc, std::string_view where);

// The NCCL element type of dtype (f32, bf16, f16, i32, i64, u8); throws for the others.
ncclDataType_t nccl_type(DType dtype);

}  // namespace tensorpar::nccl
