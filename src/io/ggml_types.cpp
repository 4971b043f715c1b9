// Block geometry of every ggml type (ggml's type traits: elements per block, bytes per block).
// Types 4 and 5 (old Q4_2/Q4_3) and 31-33 (removed repacked Q4_0 variants) are gone from ggml.
#include "io/ggml_types.h"

#include <optional>

#include "core/quant.h"

namespace tensorpar {
namespace {

constexpr int64_t kK = 256;  // K-quant super-block

// The types llama.cpp's common presets write (and their fallbacks) have a DType with the same
// layout, so they load as they are; the rest: block geometry only.
template <DType T>
void decode(float* out, const std::byte* src, int64_t n) {
  dequantize_row(out, src, T, n);
}
template <DType T>
StoredFormat loadable(const char* name) {
  return {name, dtype_block_elems(T), dtype_block_bytes(T), T, decode<T>};
}

const StoredFormat kQ50 = loadable<DType::kQ5_0>("Q5_0");
const StoredFormat kQ51 = loadable<DType::kQ5_1>("Q5_1");
const StoredFormat kQ2K = loadable<DType::kQ2_K>("Q2_K");
const StoredFormat kQ3K = loadable<DType::kQ3_K>("Q3_K");
const StoredFormat kQ4K = loadable<DType::kQ4_K>("Q4_K");
const StoredFormat kQ5K = loadable<DType::kQ5_K>("Q5_K");
const StoredFormat kQ6K = loadable<DType::kQ6_K>("Q6_K");
const StoredFormat kIQ4NL = loadable<DType::kIQ4_NL>("IQ4_NL");
const StoredFormat kQ81{"Q8_1", 32, 40, std::nullopt, nullptr};
const StoredFormat kQ8K{"Q8_K", kK, 292, std::nullopt, nullptr};
const StoredFormat kIQ2XXS{"IQ2_XXS", kK, 66, std::nullopt, nullptr};
const StoredFormat kIQ2XS{"IQ2_XS", kK, 74, std::nullopt, nullptr};
const StoredFormat kIQ3XXS{"IQ3_XXS", kK, 98, std::nullopt, nullptr};
const StoredFormat kIQ1S{"IQ1_S", kK, 50, std::nullopt, nullptr};
const StoredFormat kIQ3S{"IQ3_S", kK, 110, std::nullopt, nullptr};
const StoredFormat kIQ2S{"IQ2_S", kK, 82, std::nullopt, nullptr};
const StoredFormat kIQ4XS{"IQ4_XS", kK, 136, std::nullopt, nullptr};
const StoredFormat kI8{"I8", 1, 1, std::nullopt, nullptr};
const StoredFormat kI16{"I16", 1, 2, std::nullopt, nullptr};
const StoredFormat kIQ1M{"IQ1_M", kK, 56, std::nullopt, nullptr};
const StoredFormat kTQ10{"TQ1_0", kK, 54, std::nullopt, nullptr};
const StoredFormat kTQ20{"TQ2_0", kK, 66, std::nullopt, nullptr};
const StoredFormat kMXFP4{"MXFP4", 32, 17, std::nullopt, nullptr};
const StoredFormat kNVFP4{"NVFP4", 64, 36, std::nullopt, nullptr};
const StoredFormat kQ10{"Q1_0", 128, 18, std::nullopt, nullptr};

struct Entry {
  uint32_t id;
  const StoredFormat* format;
};

const Entry kTable[] = {
    {0, &kStoredF32},  {1, &kStoredF16},  {2, &kStoredQ4_0}, {3, &kStoredQ4_1},  {6, &kQ50},
    {7, &kQ51},        {8, &kStoredQ8_0}, {9, &kQ81},        {10, &kQ2K},        {11, &kQ3K},
    {12, &kQ4K},       {13, &kQ5K},       {14, &kQ6K},       {15, &kQ8K},        {16, &kIQ2XXS},
    {17, &kIQ2XS},     {18, &kIQ3XXS},    {19, &kIQ1S},      {20, &kIQ4NL},      {21, &kIQ3S},
    {22, &kIQ2S},      {23, &kIQ4XS},     {24, &kI8},        {25, &kI16},        {26, &kStoredI32},
    {27, &kStoredI64}, {28, &kStoredF64}, {29, &kIQ1M},      {30, &kStoredBF16}, {34, &kTQ10},
    {35, &kTQ20},      {39, &kMXFP4},     {40, &kNVFP4},     {41, &kQ10},
};

}  // namespace

const StoredFormat* ggml_format(uint32_t type) {
  for (const Entry& e : kTable)
    if (e.id == type) return e.format;
  return nullptr;
}

}  // namespace tensorpar
