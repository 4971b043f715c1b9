// Checked wrappers around the MPI C API: every return code goes through
// mpi_check, which turns a failure into a tensorpar::Error carrying MPI's own message.
#pragma once

#include <mpi.h>

#include <string_view>

#include "comm/communicator.h"
#include "core/dtype.h"

namespace tensorpar::mpi {

// Throws Error("[where] MPI error N: <MPI_Error_string>") when rc != MPI_SUCCESS.
void mpi_check(int rc, std::string_view where);

// The MPI datatype that moves elements of `dtype` unchanged (16-bit floats travel as
// MPI_UINT16_T; they are widened to f32 before any reduction).
MPI_Datatype mpi_move_type(DType dtype);
// The MPI datatype reductions run in: f32, i32, i64 (f16/bf16 are reduced as f32).
MPI_Datatype mpi_reduce_type(DType dtype);
MPI_Op mpi_op(ReduceOp op);

}  // namespace tensorpar::mpi
