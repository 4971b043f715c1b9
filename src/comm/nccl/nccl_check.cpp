// cuda_check and nccl_check.
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

}  // namespace tensorpar::nccl
