// The MPI backend (OpenMPI): one rank per process, groups through MPI_Comm_split.
// Compiled from stub_mpi_backend.cpp (is_available() == false) when MPI is not found.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace tensorpar::mpi {

bool is_available();
// This process's MPI world (initialises MPI with MPI_THREAD_MULTIPLE on first use).
std::unique_ptr<Communicator> create_world(const CommOptions& options);
// This process's host, as the lowest MPI world rank on it (ranks that share memory, by
// MPI_COMM_TYPE_SHARED). Collective over the world.
int64_t host_id(const CommOptions& options);
// This rank failed outside a collective (its own code threw): tells the peers, whose pending
// and later collectives then fail naming this rank and `why`, and marks the job failed, so this
// process aborts it at exit once the peers that can answer have reported (within grace_s).
// Does nothing when a collective of this rank already failed (the peers found out themselves).
void announce_failure(const std::string& why, double grace_s);

}  // namespace tensorpar::mpi
