// Built when CUDA or NCCL was not found at configure time.
#include "comm/nccl/nccl_backend.h"

namespace tensorpar::nccl {

bool is_available() { return false; }

std::unique_ptr<Communicator> create(Communicator&, int, const CommOptions&) {
  TP_CHECK(false, "[nccl::create] tensorpar was built without CUDA/NCCL");
  return nullptr;
}

}  // namespace tensorpar::nccl
