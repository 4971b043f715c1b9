// Crash-safe file replacement: write `<path>.tmp`, fsync it, rename over `path`, fsync the
// directory. A crash at any point leaves either the old file or the new one, never a mix.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace tensorpar {

class AtomicFileWriter {
 public:
  // Creates (truncates) `<path>.tmp`; throws Error naming the path.
  explicit AtomicFileWriter(std::string path);
  // Removes the temp file unless commit() succeeded.
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(std::span<const std::byte> bytes);
  void write(const void* data, size_t n) { write({static_cast<const std::byte*>(data), n}); }
  int64_t written() const { return written_; }
  // fsync, close, rename over the final path, fsync the directory.
  void commit();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  int64_t written_ = 0;
  bool committed_ = false;
};

// Writes `bytes` to `path` atomically.
void write_file_atomic(const std::string& path, std::span<const std::byte> bytes);

}  // namespace tensorpar
