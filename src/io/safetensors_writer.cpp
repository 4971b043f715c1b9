// safetensors writer: JSON header built with nlohmann-json, padded to 8 bytes, then each
// tensor's contiguous bytes, all through AtomicFileWriter.
#include "io/safetensors_writer.h"

#include <nlohmann/json.hpp>
#include <set>

#include "io/atomic_file.h"

namespace tensorpar {

std::string safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kU8:
      return "U8";
    default:
      TP_CHECK(false, "[save_safetensors] dtype ", dtype_name(t),
               " has no safetensors equivalent (quantized blocks); convert to a float type first");
  }
  return "";
}

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  int64_t pos = 0;
  for (const NamedTensor& nt : tensors) {
    TP_CHECK(nt.name != "__metadata__" && names.insert(nt.name).second, "[save_safetensors] '",
             path, "': tensor name '", nt.name, "' is reserved or repeated");
    TP_CHECK(nt.tensor.defined() && nt.tensor.device() == Device::kCpu, "[save_safetensors] '",
             path, "': tensor '", nt.name, "' is undefined or not on the CPU");
    const int64_t n = nt.tensor.nbytes();
    header[nt.name] = {{"dtype", safetensors_dtype_name(nt.tensor.dtype())},
                       {"shape", nt.tensor.shape()},
                       {"data_offsets", {pos, pos + n}}};
    pos += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();

  AtomicFileWriter w(path);
  w.write(&n, 8);
  w.write(text.data(), text.size());
  for (const NamedTensor& nt : tensors) {
    const Tensor c = nt.tensor.contiguous();
    w.write(c.raw(), size_t(c.nbytes()));
  }
  w.commit();
}

}  // namespace tensorpar
