// libFuzzer target: GGUF parsing on arbitrary bytes, then metadata rendering and tensor reads
// of what parsed. Any crash, sanitizer report or exception other than tensorpar::Error is a bug.
#include <span>

#include "fuzz_common.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensorpar;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const GgufHeader h = parse_gguf(bytes, "fuzz.gguf");
    for (const auto& [key, value] : h.metadata.entries()) {
      (void)GgufMetadata::describe(value);
      try {
        (void)h.metadata.get_u32(key);
      } catch (const Error&) {
      }
      try {
        (void)h.metadata.get_f32_array(key);
      } catch (const Error&) {
      }
    }
    for (const GgufTensorInfo& t : h.tensors) {
      fuzz::exercise(StoredTensor{t.name, "fuzz.gguf", t.shape, t.format,
                                  bytes.data() + h.data_start + t.offset, t.nbytes, nullptr});
    }
  } catch (const Error&) {
  }
  return 0;
}
