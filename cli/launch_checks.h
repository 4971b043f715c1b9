// Checks made before any rank starts: a process started by an MPI launcher (mpirun, mpiexec,
// srun) must use the MPI backend, or each process would run the whole job alone and their
// outputs would interleave.
#pragma once

#include <string>

#include "cli/commands.h"

namespace tensorpar::cli {

// The number of processes an MPI launcher started (OMPI_COMM_WORLD_SIZE, PMI_SIZE, ...); 0 when
// this process was not started by one. `source` gets the variable's "NAME=VALUE".
int mpi_launcher_world_size(std::string* source = nullptr);

// Throws Error ("[command] started by an MPI launcher ... add --backend mpi") when this process
// is one of several an MPI launcher started but the backend is threads.
void check_launch(const CommonOptions& common, const char* command);

}  // namespace tensorpar::cli
