// The NCCL backend: device buffers on one GPU per rank; the ncclUniqueId travels through a
// host communicator (threads or MPI). Compiled from stub_nccl_backend.cpp when CUDA/NCCL are
// not found at configure time.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace tensorpar::nccl {

bool is_available();
// A NCCL communicator over the same ranks as `host` (collective over host), using GPU
// `device` of this process.
std::unique_ptr<Communicator> create(Communicator& host, int device, const CommOptions& options);

}  // namespace tensorpar::nccl
