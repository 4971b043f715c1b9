// safetensors reading: header parsing with the reference implementation's validation (on an
// in-memory buffer, so it can be fuzzed), and SafetensorsFile, an mmap-backed TensorStore.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "io/tensor_store.h"

namespace tensorpar {

inline constexpr int64_t kSafetensorsMaxHeader = 100'000'000;  // the reference's cap

// One entry of a safetensors header, checked against the buffer it came from.
struct SafetensorsEntry {
  std::string name;
  const StoredFormat* format = nullptr;  // F8 and other known-but-unloadable dtypes too
  Shape shape;
  int64_t begin = 0, end = 0;  // data_offsets, relative to the data section
};

struct SafetensorsHeader {
  int64_t data_start = 0;                       // 8 + header length
  std::vector<SafetensorsEntry> entries;        // in data order
  std::map<std::string, std::string> metadata;  // __metadata__
};

// Parses and validates the header of a whole safetensors file held in `file` (header length,
// JSON object, known dtypes, shapes, offsets inside the data, contiguous and non-overlapping,
// sizes matching dtype x shape). `name` is used in error messages. Throws Error.
SafetensorsHeader parse_safetensors(std::span<const std::byte> file, const std::string& name);

// The StoredFormat for a safetensors dtype string ("BF16", "F8_E4M3", ...), null if unknown.
const StoredFormat* safetensors_format(std::string_view dtype);

class SafetensorsFile final : public TensorStore {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const SafetensorsHeader& header() const { return header_; }

  std::vector<TensorInfo> tensors() const override;
  std::optional<TensorInfo> find(std::string_view name) const override;
  StoredTensor stored(std::string_view name) const override;

 private:
  SafetensorsFile(std::shared_ptr<MappedFile> file, SafetensorsHeader header);
  TensorInfo info_of(const SafetensorsEntry& e) const;
  std::shared_ptr<MappedFile> file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> entries_ index
};

}  // namespace tensorpar
