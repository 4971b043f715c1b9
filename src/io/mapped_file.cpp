// mmap of a whole file, read-only and shared. An empty file maps to nothing (mmap of zero
// bytes is an error), so data() is null and size() 0.
#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace tensorpar {

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TP_CHECK(fd >= 0, "[MappedFile] cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    TP_CHECK(false, "[MappedFile] '", path, "' is not a regular file",
             err ? std::string(": ") + std::strerror(err) : std::string());
  }
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->size_ = int64_t(st.st_size);
  if (m->size_ > 0) {
    void* p = ::mmap(nullptr, size_t(m->size_), PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    TP_CHECK(p != MAP_FAILED, "[MappedFile] cannot map '", path, "' (", m->size_,
             " bytes): ", std::strerror(err));
    m->data_ = static_cast<const std::byte*>(p);
  } else {
    ::close(fd);
  }
  return m;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), size_t(size_));
}

}  // namespace tensorpar
