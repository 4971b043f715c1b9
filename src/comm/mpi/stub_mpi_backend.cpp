// Built when MPI was not found at configure time.
#include "comm/mpi/mpi_backend.h"

namespace tensorpar::mpi {

bool is_available() { return false; }

std::unique_ptr<Communicator> create_world(const CommOptions&) {
  TP_CHECK(false, "[mpi::create_world] tensorpar was built without MPI (install libopenmpi-dev)");
  return nullptr;
}

int64_t host_id(const CommOptions&) {
  TP_CHECK(false, "[mpi::host_id] tensorpar was built without MPI (install libopenmpi-dev)");
  return 0;
}

void announce_failure(const std::string&, double) {}

}  // namespace tensorpar::mpi
