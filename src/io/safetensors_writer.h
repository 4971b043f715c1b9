// Writing safetensors files (atomically: temp file, fsync, rename), e.g. a rank's shard of a
// training checkpoint with each tensor's global shape and offsets recorded in __metadata__.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tensorpar {

struct NamedTensor {
  std::string name;
  Tensor tensor;  // f32, bf16, f16, i32, i64 or u8; any strides (written contiguous)
};

// Writes `tensors` (data in the given order; names must be unique and not "__metadata__") and
// `metadata` to `path`. The header is padded with spaces to a multiple of 8 bytes so every
// tensor's data starts 8-byte aligned. Throws Error (quantized dtypes have no safetensors form).
void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// The safetensors dtype string of a DType ("F32", "BF16", ...); throws for quantized types.
std::string safetensors_dtype_name(DType t);

}  // namespace tensorpar
