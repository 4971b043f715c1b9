// Entry points of the NCCL backend: availability (a CUDA device is visible) and creation over a
// host group.
#include "comm/nccl/nccl_backend.h"

#include <cuda_runtime.h>

#include "comm/nccl/nccl_communicator.h"

namespace tensorpar::nccl {

bool is_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::unique_ptr<Communicator> create(Communicator& host, int device, const CommOptions& options) {
  return std::make_unique<NcclCommunicator>(host, nullptr, device, options);
}

}  // namespace tensorpar::nccl
