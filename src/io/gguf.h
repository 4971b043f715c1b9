// GGUF (v3, also v2) reading: a parser over an in-memory buffer (fuzzable) that bounds every
// count and length by the bytes left before allocating, and GgufFile, an mmap-backed
// TensorStore. GGUF lists dims contiguous-first; TensorStore shapes are the reverse (HF order),
// so a [out, in] weight stored with dims {in, out} reads as shape [out, in].
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/ggml_types.h"
#include "io/gguf_metadata.h"
#include "io/mapped_file.h"
#include "io/tensor_store.h"

namespace tensorpar {

inline constexpr uint32_t kGgufDefaultAlignment = 32;

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // as stored: dims[0] is the contiguous one
  Shape shape;                // row-major (reversed dims)
  uint32_t ggml_type = 0;
  const StoredFormat* format = nullptr;
  int64_t offset = 0;  // relative to the data section (a multiple of the alignment)
  int64_t nbytes = 0;
};

struct GgufHeader {
  uint32_t version = 0;
  uint32_t alignment = kGgufDefaultAlignment;  // general.alignment, else 32
  int64_t data_start = 0;                      // absolute, aligned
  GgufMetadata metadata;
  std::vector<GgufTensorInfo> tensors;  // in file order
};

// Parses and validates a whole GGUF file held in `file` (magic, version, counts, metadata,
// tensor infos, alignment, every tensor's byte range inside the file and no two overlapping).
// `name` is used in error messages. Throws Error.
GgufHeader parse_gguf(std::span<const std::byte> file, const std::string& name);

class GgufFile final : public TensorStore {
 public:
  static std::shared_ptr<GgufFile> open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  const GgufMetadata& metadata() const { return header_.metadata; }
  const GgufHeader& header() const { return header_; }
  // GGUF view of a tensor (raw dims, ggml type); null when absent.
  const GgufTensorInfo* gguf_tensor(std::string_view name) const;

  std::vector<TensorInfo> tensors() const override;
  std::optional<TensorInfo> find(std::string_view name) const override;
  StoredTensor stored(std::string_view name) const override;

 private:
  GgufFile(std::shared_ptr<MappedFile> file, GgufHeader header);
  TensorInfo info_of(const GgufTensorInfo& t) const;
  std::shared_ptr<MappedFile> file_;
  GgufHeader header_;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace tensorpar
