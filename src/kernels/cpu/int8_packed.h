// Row-packed weights for the int8 kernels (int8_matmul.h): the 32-weight GGUF types (Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, IQ4_NL) and the K-quants Q4_K, Q5_K, Q6_K with the blocks of kPackedRows = 8
// consecutive rows interleaved, so that one stream through memory feeds 8 output rows and every
// 32-bit lane of a VPDPBUSD holds 4 weights of one row: one activation load serves 8 rows, the
// weight scales of 8 rows are one vector, and no row needs a horizontal sum per block. llama.cpp
// repacks its Q4_0 weights at load for the same reason; the layout below is this project's own.
//
// Layout. A packed tensor (N, K) holds ceil(N / 8) groups (the last one padded with zero rows),
// each the same bytes as its 8 rows in the GGUF layout (8 x nb x block bytes, nb = K / 32, or
// K / 256 for the K-quants), block after block, each block of the group its codes then its
// extras (8 x block bytes in all: one stream through memory, as the GGUF rows are):
//   block b: codes (code_bytes) | extras (8 x block bytes - code_bytes)
// A "register" below is 64 bytes holding 8 bytes of each of the 8 rows: byte 32 h + 4 r + j =
// row r's source byte 4 h + j (h = 0, 1; j = 0..3), so that lane l (0..15) of the register
// loaded is row l % 8's 4 bytes 4 (l / 8) .. +3.
// Block b of the group, rows r = 0..7, 32-weight types:
// - codes, 4-bit types (128 bytes): byte c * 32 + r * 4 + j = row r's qs[4c + j] (c = 0..3), as
//   stored (low nibble element 4c + j, high nibble element 16 + 4c + j). Loaded as two 512-bit
//   registers, lane l (0..15) of the first is row l % 8's bytes 4 (l / 8) .. +3, of the second
//   bytes 8 + 4 (l / 8) .. +3.
// - codes, Q8_0 (256 bytes): byte c * 32 + r * 4 + j = row r's qs[4c + j] + 128 (c = 0..7), the
//   unsigned codes VPDPBUSD multiplies.
// - extras: the 8 rows' f16 d (16 bytes); Q4_1, Q5_1: then the 8 rows' f16 m (16 bytes); Q5_0,
//   Q5_1: then 4 x 64-bit masks of the fifth bits, one per 64-code register the kernel forms
//   (low nibbles of codes bytes 0-63, their high nibbles, low nibbles of bytes 64-127, their high
//   nibbles): bit 4 l + j = the fifth bit of the element lane l, byte j of that register holds.
// Super-block b of the group, K-quants (sub-block j of Q4_K/Q5_K: weights 32 j .. +31; of Q6_K:
// 16 j .. +15):
// - Q4_K, Q5_K codes (1024 bytes): register 4 c + k (c, k = 0..3) holds qs[32 c + 8 k .. +7]:
//   low nibbles are weights 64 c + 8 k .. +7 (sub-block 2 c), high nibbles 64 c + 32 + 8 k ..
//   (sub-block 2 c + 1).
// - Q5_K extras first: 32 x 64-bit masks of the fifth bits, mask 2 (4 c + k) + n for register
//   4 c + k's low (n = 0) or high (n = 1) nibbles, bit 4 l + j for the element lane l, byte j
//   holds.
// - Q4_K, Q5_K extras (Q5_K: after its masks): the 8 rows' f16 d (16 bytes), f16 dmin (16), then
//   the 6-bit scales and mins of the 64 (sub-block j, row r) pairs p = 8 j + r (96 bytes): byte p
//   = scale's low 4 bits | min's low 4 bits << 4; byte 64 + p % 32, nibble p / 32 = scale's top
//   2 bits | min's << 2.
// - Q6_K codes (1536 bytes): for half h = 0, 1 and k = 0..3, three registers at 192 (4 h + k):
//   ql[64 h + 8 k ..], ql[64 h + 32 + 8 k ..], qh[32 h + 8 k ..]; weight 128 h + 32 q + 8 k + i
//   (q = 0..3) is nibble q / 2 of the first (q even) or second (q odd) and bits 2 q, 2 q + 1 of
//   the third.
// - Q6_K extras: the 8 rows' f16 d (16 bytes), then the int8 scales, byte 8 j + r = row r's
//   scale of sub-block j (128 bytes).
// The packing is exact and invertible (int8_unpack_rows gives back the GGUF bytes).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"

namespace tensorpar {

// Whether int8_pack_rows takes weights of type t (the 32-weight GGUF types, Q4_K, Q5_K, Q6_K).
constexpr bool int8_packable(DType t) {
  return (t >= DType::kQ8_0 && t <= DType::kIQ4_NL) || (t >= DType::kQ4_K && t <= DType::kQ6_K);
}

namespace int8_packed {

// Bytes of one block of one group: its codes, then its extras (see above); base = the GGUF type.
constexpr int64_t block_bytes(DType base) { return kPackedRows * dtype_block_bytes(base); }
constexpr int64_t code_bytes(DType base) {
  return base == DType::kQ8_0 ? 256 : base == DType::kQ6_K ? 1536 : dtype_is_kquant(base) ? 1024 : 128;
}
constexpr int64_t extra_bytes(DType base) { return block_bytes(base) - code_bytes(base); }
// Offsets inside a block's extras.
constexpr int64_t kScaleOffset = 0;
constexpr int64_t offset_m(DType) { return 16; }  // Q4_1, Q5_1
constexpr int64_t offset_qh(DType base) { return base == DType::kQ5_1 ? 32 : 16; }  // Q5_0, Q5_1
// K-quants: offsets inside a super-block's codes region and extras.
constexpr int64_t offset_kd(DType base) { return base == DType::kQ5_K ? 256 : 0; }  // in the extras
constexpr int64_t offset_kdmin(DType base) { return offset_kd(base) + 16; }
constexpr int64_t offset_kscales(DType base) { return offset_kd(base) + (base == DType::kQ6_K ? 16 : 32); }
// Bytes of one group of 8 rows of nb blocks.
constexpr int64_t group_bytes(DType base, int64_t nb) { return nb * block_bytes(base); }

}  // namespace int8_packed

// w (N, K) of a packable type (rows may be strided) as a row-packed tensor of the same shape
// (its dtype dtype_row_packed(w.dtype())); new storage, w untouched. Throws for other types.
Tensor int8_pack_rows(const Tensor& w);
// The GGUF layout back (N, K), bitwise the tensor int8_pack_rows was given.
Tensor int8_unpack_rows(const Tensor& packed);
// Row r of a row-packed tensor in its GGUF layout (dst: K / 32 blocks of the GGUF type).
void int8_packed_row(const Tensor& packed, int64_t r, void* dst);

}  // namespace tensorpar
