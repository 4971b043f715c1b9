// Read-only memory mapping of a whole file (RAII). Shared through std::shared_ptr so that
// tensors borrowed from the mapping (Tensor::borrow's keep_alive) keep it mapped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace tensorpar {

class MappedFile {
 public:
  // Maps `path` read-only; throws Error naming the path when it cannot be opened or mapped.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  int64_t size() const { return size_; }
  std::span<const std::byte> bytes() const { return {data_, size_t(size_)}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const std::byte* data_ = nullptr;  // null for an empty file
  int64_t size_ = 0;
};

}  // namespace tensorpar
