// TensorStore: what the model loader sees of a weights source (a safetensors file, a sharded
// Hugging Face directory, a GGUF file): list tensors, and read a named tensor, or a range of it
// along one dim (a rank's tensor-parallel slice), in a requested dtype.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "io/tensor_copy.h"

namespace tensorpar {

struct TensorInfo {
  std::string name;
  Shape shape;                 // row-major ("HF order"): the last dim is contiguous
  std::string format;          // the stored type as the file names it: "BF16", "Q4_1", "Q6_K"
  std::optional<DType> dtype;  // our DType with the stored layout, when there is one
  int64_t offset = 0;          // absolute byte offset inside `file`
  int64_t nbytes = 0;
  std::string file;
};

class TensorStore {
 public:
  virtual ~TensorStore() = default;

  // Every tensor, in file order (shard by shard for a sharded directory).
  virtual std::vector<TensorInfo> tensors() const = 0;
  // The tensor's info, or nullopt when absent.
  virtual std::optional<TensorInfo> find(std::string_view name) const = 0;
  // The tensor's bytes; throws Error naming the tensor and the file(s) searched when absent.
  virtual StoredTensor stored(std::string_view name) const = 0;

  bool contains(std::string_view name) const { return find(name).has_value(); }
  // Whole tensor, copied into an owning tensor of dtype `out` (nullopt: the stored dtype,
  // quantized stays quantized; float targets convert / dequantize).
  Tensor read(std::string_view name, std::optional<DType> out = std::nullopt) const;
  // Elements [begin, end) along `dim` (e.g. rows [r0, r1) with dim 0 of an [out, in] weight,
  // columns with dim 1), copying only those bytes. See copy_slice for quantized columns.
  Tensor read_slice(std::string_view name, int dim, int64_t begin, int64_t end,
                    std::optional<DType> out = std::nullopt) const;
  // Zero-copy view over the mapping (kept alive by the tensor); needs a stored layout that is
  // one of our DTypes and element-aligned data, else throws (use read).
  Tensor view(std::string_view name) const;
};

// Opens a .gguf file, a .safetensors file, or a Hugging Face directory (sharded with
// model.safetensors.index.json, or a single model.safetensors); other file names are told
// apart by the GGUF magic. Readers are immutable once open: share one across rank threads.
std::shared_ptr<TensorStore> open_tensor_store(const std::string& path);

}  // namespace tensorpar
