// mpi_check and the DType -> MPI_Datatype mapping.
#include "comm/mpi/mpi_check.h"

#include <string>

#include "comm/communicator.h"
#include "core/error.h"

namespace tensorpar::mpi {

void mpi_check(int rc, std::string_view where) {
  if (rc == MPI_SUCCESS) [[likely]]
    return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  throw Error(detail::concat("[", where, "] MPI error ", rc, ": ", std::string(text, size_t(len))));
}

MPI_Datatype mpi_move_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kBF16:
    case DType::kF16: return MPI_UINT16_T;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    case DType::kU8: return MPI_UINT8_T;
    default: break;
  }
  TP_CHECK(false, "[mpi] dtype ", dtype_name(dtype),
           " cannot be communicated: expected f32, bf16, f16, i32, i64 or u8");
  return MPI_DATATYPE_NULL;
}

MPI_Datatype mpi_reduce_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16: return MPI_FLOAT;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    default: break;
  }
  TP_CHECK(false, "[mpi] dtype ", dtype_name(dtype),
           " cannot be reduced: expected f32, bf16, f16, i32 or i64");
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
  }
  TP_CHECK(false, "[mpi] unknown reduce op ", int(op));
  return MPI_OP_NULL;
}

}  // namespace tensorpar::mpi
