// Checked wrappers for the CUDA runtime and NCCL: a failed call becomes a
// tensorpar::Error carrying the library's own message.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <string_view>

namespace tensorpar::nccl {

// Throws Error("[where] CUDA error N (name): text") unless rc == cudaSuccess.
void cuda_check(cudaError_t rc, std::string_view where);
// Throws Error("[where] NCCL error N: text (last: ncclGetLastError)") unless rc == ncclSuccess.
void nccl_check(ncclResult_t rc, std::string_view where);

}  // namespace tensorpar::nccl
