// The TensorStore conveniences shared by every reader, and opening a weights path by its kind.
#include "io/tensor_store.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/gguf.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"

namespace tensorpar {

Tensor TensorStore::read(std::string_view name, std::optional<DType> out) const {
  return copy_whole(stored(name), out);
}

Tensor TensorStore::read_slice(std::string_view name, int dim, int64_t begin, int64_t end,
                               std::optional<DType> out) const {
  return copy_slice(stored(name), dim, begin, end, out);
}

Tensor TensorStore::view(std::string_view name) const {
  StoredTensor s = stored(name);
  TP_CHECK(s.format->dtype.has_value(), "[TensorStore::view] tensor '", s.name, "' in '", s.file,
           "' is stored as ", s.format->name, ", which has no in-memory dtype; use read()");
  // Block structs hold f16 scales: 2-byte alignment is what they need.
  const int64_t align = s.format->block_elems > 1 ? 2 : s.format->block_bytes;
  TP_CHECK(reinterpret_cast<uintptr_t>(s.data) % uintptr_t(align) == 0,
           "[TensorStore::view] tensor '", s.name, "' in '", s.file, "' is not ", align,
           "-byte aligned in the file; use read()");
  return Tensor::borrow(const_cast<std::byte*>(s.data), s.shape, *s.format->dtype,
                        std::const_pointer_cast<void>(s.keep_alive));
}

std::shared_ptr<TensorStore> open_tensor_store(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) return HfCheckpoint::open(path);
  TP_CHECK(fs::exists(path, ec), "[open_tensor_store] '", path, "' does not exist");
  if (path.ends_with(".gguf")) return GgufFile::open(path);
  if (path.ends_with(".safetensors")) return SafetensorsFile::open(path);
  // Any other name: GGUF files start with their magic; safetensors with a length, then '{'.
  char magic[4] = {};
  std::ifstream(path, std::ios::binary).read(magic, 4);
  if (std::memcmp(magic, "GGUF", 4) == 0) return GgufFile::open(path);
  return SafetensorsFile::open(path);
}

}  // namespace tensorpar
