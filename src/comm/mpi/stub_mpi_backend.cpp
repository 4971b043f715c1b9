// Built when MPI was not found at configure time.
#include "comm/mpi/mpi_backend.h"

namespace tensorpar::mpi {

bool is_available() { return false; }

std::unique_ptr<Communicator> create_world(const CommOptions&) {
  TP_CHECK(false, "[mpi::create_world] tensorpar was built without MPI (install libopenmpi-dev)");
  return nullptr;
}

void announce_failure(const std::string&, double) {}

}  // namespace tensorpar::mpi
