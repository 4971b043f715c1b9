// POSIX implementation of the temp-file + fsync + rename + directory-fsync protocol.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace tensorpar {

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  tmp_ = path_ + ".tmp";
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TP_CHECK(fd_ >= 0, "[AtomicFileWriter] cannot create '", tmp_, "': ", std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFileWriter::write(std::span<const std::byte> bytes) {
  TP_CHECK(fd_ >= 0, "[AtomicFileWriter] '", path_, "' already committed");
  const std::byte* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    TP_CHECK(n > 0, "[AtomicFileWriter] writing '", tmp_, "' failed after ", written_,
             " bytes: ", std::strerror(errno));
    p += n;
    left -= size_t(n);
    written_ += n;
  }
}

void AtomicFileWriter::commit() {
  TP_CHECK(fd_ >= 0, "[AtomicFileWriter] '", path_, "' already committed");
  TP_CHECK(::fsync(fd_) == 0, "[AtomicFileWriter] fsync of '", tmp_,
           "' failed: ", std::strerror(errno));
  const int rc = ::close(fd_);
  fd_ = -1;
  TP_CHECK(rc == 0, "[AtomicFileWriter] closing '", tmp_, "' failed: ", std::strerror(errno));
  TP_CHECK(::rename(tmp_.c_str(), path_.c_str()) == 0, "[AtomicFileWriter] renaming '", tmp_,
           "' to '", path_, "' failed: ", std::strerror(errno));
  committed_ = true;
  // The rename is durable only once the directory entry is.
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TP_CHECK(dfd >= 0, "[AtomicFileWriter] cannot open directory '", dir,
           "': ", std::strerror(errno));
  const int src = ::fsync(dfd);
  ::close(dfd);
  TP_CHECK(src == 0, "[AtomicFileWriter] fsync of directory '", dir,
           "' failed: ", std::strerror(errno));
}

void write_file_atomic(const std::string& path, std::span<const std::byte> bytes) {
  AtomicFileWriter w(path);
  w.write(bytes);
  w.commit();
}

}  // namespace tensorpar
