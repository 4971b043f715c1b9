// The MPI backend (OpenMPI): one rank per process, groups through MPI_Comm_split.
// Compiled from stub_mpi_backend.cpp (is_available() == false) when MPI is not found.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace tensorpar::mpi {

bool is_available();
// This process's MPI world (initialises MPI with MPI_THREAD_MULTIPLE on first use).
std::unique_ptr<Communicator> create_world(const CommOptions& options);

}  // namespace tensorpar::mpi
