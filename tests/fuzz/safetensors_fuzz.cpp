// libFuzzer target: safetensors header parsing on arbitrary bytes, then reads of what parsed.
// Any crash, sanitizer report or exception other than tensorpar::Error is a bug.
#include <span>

#include "fuzz_common.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensorpar;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const SafetensorsHeader h = parse_safetensors(bytes, "fuzz.safetensors");
    for (const SafetensorsEntry& e : h.entries) {
      fuzz::exercise(StoredTensor{e.name, "fuzz.safetensors", e.shape, e.format,
                                  bytes.data() + h.data_start + e.begin, e.end - e.begin, nullptr});
    }
  } catch (const Error&) {
  }
  return 0;
}
