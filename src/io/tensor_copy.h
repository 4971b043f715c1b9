// How a file stores a tensor (its element format and where its bytes are) and the one routine
// that copies a range of it along any dim into an owning Tensor, converting on the way. Every
// reader (safetensors, GGUF) funnels its reads through copy_slice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/tensor.h"

namespace tensorpar {

// An element format as a file spells it ("BF16", "Q6_K"), with its block geometry.
struct StoredFormat {
  const char* name = "?";
  int64_t block_elems = 1;     // elements per block (1 for plain types)
  int64_t block_bytes = 0;     // bytes per block
  std::optional<DType> dtype;  // our DType with exactly this layout, if any
  // Decodes n elements (a multiple of block_elems) to f32; null when loading is unsupported.
  void (*decode)(float* out, const std::byte* src, int64_t n) = nullptr;
};

// Formats with a decoder, for readers to share.
extern const StoredFormat kStoredF32, kStoredF16, kStoredBF16, kStoredF64, kStoredI64, kStoredI32,
    kStoredU8, kStoredQ8_0, kStoredQ4_0, kStoredQ4_1;

// A tensor's bytes inside a mapped file, row-major (last dim contiguous).
struct StoredTensor {
  std::string name;
  std::string file;
  Shape shape;
  const StoredFormat* format = nullptr;
  const std::byte* data = nullptr;
  int64_t nbytes = 0;
  std::shared_ptr<const void> keep_alive;  // the mapping
};

// Element count of a shape read from a file. Stricter than shape_numel: the product of the
// non-zero dims must fit in int64 too, so that strides of an empty tensor such as [0, 2^40,
// 2^40] cannot overflow either. Throws Error (mentioning `where`).
int64_t file_shape_numel(const Shape& shape, const char* where);

// Copies elements [begin, end) along `dim` (all other dims whole) into a new contiguous tensor
// of dtype `out` (std::nullopt: the stored dtype, so quantized blocks stay quantized). Slicing
// the last dim of a quantized tensor while keeping it quantized needs block-aligned bounds;
// converting to a float type dequantizes the covering blocks and slices exactly.
Tensor copy_slice(const StoredTensor& src, int dim, int64_t begin, int64_t end,
                  std::optional<DType> out = std::nullopt);
// Sub-tensor `index` along dim 0 of src (shape src.shape[1:]), sharing its bytes: one matrix of
// a stacked 3-D tensor (GGUF's MoE experts, (E, rows, cols)). Throws naming the tensor when
// index is out of range or src has fewer than 2 dims.
StoredTensor outer_part(const StoredTensor& src, int64_t index);
// The whole tensor (also 0-dim ones), converted like copy_slice.
Tensor copy_whole(const StoredTensor& src, std::optional<DType> out = std::nullopt);

}  // namespace tensorpar
