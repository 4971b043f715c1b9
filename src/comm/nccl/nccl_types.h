// The mapping of tensorpar's element types and reduce ops to NCCL's enums. Pure functions of
// their argument (no GPU, no CUDA call), so they are tested on machines without a GPU.
#pragma once

#include <nccl.h>

#include "comm/communicator.h"
#include "core/dtype.h"

namespace tensorpar::nccl {

// The NCCL element type of dtype (f32, bf16, f16, i32, i64, u8); throws Error for the others.
ncclDataType_t nccl_type(DType dtype);
// The NCCL reduction of op (sum, max, min); throws Error for a value outside ReduceOp.
ncclRedOp_t nccl_op(ReduceOp op);

}  // namespace tensorpar::nccl
