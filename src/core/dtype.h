// Element types. Block-quantized weight formats use exactly GGUF's layouts (see core/quant.h):
// the legacy quants hold 32 weights per block, the K-quants 256 per super-block; a tensor of
// them has its last dim a multiple of the block size.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tensorpar {

enum class DType : uint8_t {
  kF32,
  kBF16,
  kF16,
  kI32,
  kI64,
  kU8,
  // Block quants; new ones go after the old so saved values keep their meaning.
  // 32-weight blocks:
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kIQ4_NL,
  // 256-weight super-blocks (K-quants):
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  // The types as the int8 kernels keep them after load (int8_packed.h): the blocks of 8
  // consecutive rows interleaved. Same block sizes and bytes as their GGUF type, not a GGUF
  // layout: only the int8 matmul reads them.
  kQ8_0x8,
  kQ4_0x8,
  kQ4_1x8,
  kQ5_0x8,
  kQ5_1x8,
  kIQ4_NLx8,
  kQ4_Kx8,
  kQ5_Kx8,
  kQ6_Kx8,
  // Float weights as the panel kernel keeps them after load (panel_matmul.h): each group of
  // kPanelRows = 64 output rows stored K-major, so one stream feeds 64 outputs. Only that
  // kernel (and the embedding lookup) reads them.
  kBF16x64,
  kF16x64,
  kF32x64,
};

constexpr bool dtype_is_quantized(DType t) {
  return t >= DType::kQ8_0 && t <= DType::kQ6_K;
}
// The K-quants: 256-weight super-blocks.
constexpr bool dtype_is_kquant(DType t) {
  return t >= DType::kQ2_K && t <= DType::kQ6_K;
}
// Rows per interleaved group of a row-packed type.
inline constexpr int64_t kPackedRows = 8;
// The row-packed types (kPackedRows rows' blocks interleaved) and the GGUF type each packs.
constexpr bool dtype_is_row_packed(DType t) {
  return t >= DType::kQ8_0x8 && t <= DType::kQ6_Kx8;
}
// The float types in K-major panels (panel_matmul.h).
constexpr bool dtype_is_panels(DType t) {
  return t == DType::kBF16x64 || t == DType::kF16x64 || t == DType::kF32x64;
}
// Output rows per group of a packed type: kPackedRows for the int8 kernels' types, kPanelRows
// for panels, 0 for every layout that is not packed. A packed tensor is 2-D (N, K), slices
// only along its rows at a group's start, and its storage holds whole groups.
inline constexpr int64_t kPanelRows = 64;
constexpr int64_t dtype_packed_rows(DType t) {
  return dtype_is_row_packed(t) ? kPackedRows : dtype_is_panels(t) ? kPanelRows : 0;
}
constexpr DType dtype_unpacked(DType t) {
  if (dtype_is_panels(t))
    return t == DType::kBF16x64 ? DType::kBF16 : t == DType::kF16x64 ? DType::kF16 : DType::kF32;
  if (t >= DType::kQ4_Kx8 && t <= DType::kQ6_Kx8) return DType(int(t) - int(DType::kQ4_Kx8) + int(DType::kQ4_K));
  return dtype_is_row_packed(t) ? DType(int(t) - int(DType::kQ8_0x8) + int(DType::kQ8_0)) : t;
}
// The panel form of f32, bf16 or f16 (t itself for any other type).
constexpr DType dtype_panels(DType t) {
  return t == DType::kBF16  ? DType::kBF16x64
         : t == DType::kF16 ? DType::kF16x64
         : t == DType::kF32 ? DType::kF32x64
                            : t;
}
// The packed form of a 32-weight GGUF type or of Q4_K, Q5_K, Q6_K (t itself for any other type).
constexpr DType dtype_row_packed(DType t) {
  if (t >= DType::kQ4_K && t <= DType::kQ6_K) return DType(int(t) - int(DType::kQ4_K) + int(DType::kQ4_Kx8));
  return t >= DType::kQ8_0 && t <= DType::kIQ4_NL ? DType(int(t) - int(DType::kQ8_0) + int(DType::kQ8_0x8)) : t;
}
// Elements per storage block: 1 for plain types, 32 for legacy block quants, 256 for K-quants
// (packed or not).
constexpr int64_t dtype_block_elems(DType t) {
  if (dtype_is_kquant(dtype_unpacked(t))) return 256;
  return dtype_is_quantized(t) || dtype_is_row_packed(t) ? 32 : 1;
}
// Whether elements are stored in multi-element blocks (offsets and slices at block multiples).
constexpr bool dtype_is_blocked(DType t) { return dtype_block_elems(t) > 1; }
// Bytes per storage block: sizeof(element) for plain types; ggml's block size for quants
// (34, 18, 20 for q8_0, q4_0, q4_1; 144 for q4_k, ...). Constant-folded in the kernels' loops.
constexpr int64_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: case DType::kF32x64: return 4;
    case DType::kBF16: case DType::kF16: case DType::kBF16x64: case DType::kF16x64: return 2;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
    case DType::kQ8_0: case DType::kQ8_0x8: return 34;
    case DType::kQ4_0: case DType::kIQ4_NL: case DType::kQ4_0x8: case DType::kIQ4_NLx8: return 18;
    case DType::kQ4_1: case DType::kQ4_1x8: return 20;
    case DType::kQ5_0: case DType::kQ5_0x8: return 22;
    case DType::kQ5_1: case DType::kQ5_1x8: return 24;
    case DType::kQ2_K: return 84;
    case DType::kQ3_K: return 110;
    case DType::kQ4_K: case DType::kQ4_Kx8: return 144;
    case DType::kQ5_K: case DType::kQ5_Kx8: return 176;
    case DType::kQ6_K: case DType::kQ6_Kx8: return 210;
  }
  throw std::logic_error("dtype_block_bytes: not a DType");
}
inline bool dtype_is_float(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
}
std::string_view dtype_name(DType t);
// Parses a name as printed by dtype_name ("f32", "bf16", "q4_1", ...); throws on unknown.
DType dtype_from_name(std::string_view name);
// Bytes for n elements (n a multiple of the block size for quantized types), overflow-checked.
int64_t dtype_nbytes(DType t, int64_t n);

}  // namespace tensorpar
