// Packing and unpacking of row-packed weights (layout in int8_packed.h): byte moves only.
#include "kernels/cpu/int8_packed.h"

#include <cstddef>
#include <cstring>

#include "core/error.h"
#include "core/quant.h"

namespace tensorpar {

namespace {

using namespace int8_packed;

// Where a GGUF block of type t keeps its fields (bytes; -1: none).
struct Fields {
  int64_t qs, m, qh;
};
Fields fields(DType t) {
  switch (t) {
    case DType::kQ4_1: return {offsetof(BlockQ4_1, qs), offsetof(BlockQ4_1, m), -1};
    case DType::kQ5_0: return {offsetof(BlockQ5_0, qs), -1, offsetof(BlockQ5_0, qh)};
    case DType::kQ5_1: return {offsetof(BlockQ5_1, qs), offsetof(BlockQ5_1, m), offsetof(BlockQ5_1, qh)};
    case DType::kQ8_0: return {offsetof(BlockQ8_0, qs), -1, -1};
    case DType::kIQ4_NL: return {offsetof(BlockIQ4_NL, qs), -1, -1};
    default: return {offsetof(BlockQ4_0, qs), -1, -1};
  }
}

// Moves block b of row r (GGUF bytes at `blk`) into its group's packed bytes (kPack), or back.
template <bool kPack>
void move_block(DType t, int64_t b, int r, char* blk, char* group) {
  const Fields f = fields(t);
  char* codes = group + b * block_bytes(t);
  char* extras = codes + code_bytes(t);
  auto move = [](char* packed, char* gguf, size_t n) {
    if constexpr (kPack) std::memcpy(packed, gguf, n);
    else std::memcpy(gguf, packed, n);
  };
  const uint8_t flip = t == DType::kQ8_0 ? 0x80 : 0;  // packed Q8_0: the unsigned code q + 128
  for (int c = 0; c < (t == DType::kQ8_0 ? 8 : 4); ++c)
    for (int j = 0; j < 4; ++j) {
      char& p = codes[c * 32 + r * 4 + j];
      char& q = blk[f.qs + 4 * c + j];
      if constexpr (kPack) p = char(uint8_t(q) ^ flip);
      else q = char(uint8_t(p) ^ flip);
    }
  move(extras + kScaleOffset + r * 2, blk, 2);
  if (f.m >= 0) move(extras + offset_m(t) + r * 2, blk + f.m, 2);
  if (f.qh < 0) return;
  // Mask k's lanes r and r + 8 (bits 4 r + j and 32 + 4 r + j) hold row r's bytes 4 c .. 4 c + 3,
  // c = 2 (k / 2) and c + 1; odd k the high nibbles (elements + 16).
  auto* masks = reinterpret_cast<uint8_t*>(extras + offset_qh(t));
  uint32_t qh = 0;
  if constexpr (kPack) std::memcpy(&qh, blk + f.qh, 4);
  for (int k = 0; k < 4; ++k)
    for (int half = 0; half < 2; ++half)
      for (int j = 0; j < 4; ++j) {
        const int bit = 32 * half + 4 * r + j, element = 4 * (2 * (k / 2) + half) + j + (k % 2 ? 16 : 0);
        uint8_t& m = masks[k * 8 + bit / 8];
        if constexpr (kPack) m |= uint8_t((qh >> element & 1) << (bit % 8));
        else qh |= uint32_t(m >> (bit % 8) & 1) << element;
      }
  if constexpr (!kPack) std::memcpy(blk + f.qh, &qh, 4);
}

}  // namespace

Tensor int8_pack_rows(const Tensor& w) {
  const DType t = w.dtype();
  TP_CHECK(int8_packable(t) && w.ndim() == 2 && w.strides()[1] == 1 && w.strides()[0] % 32 == 0,
           "[int8_pack_rows] got ", w.describe(), ", expected a 2-D q4_0, q4_1, q5_0, q5_1, q8_0 or iq4_nl tensor "
           "with whole blocks per row");
  const int64_t N = w.dim(0), K = w.dim(1), nb = K / 32, bb = dtype_block_bytes(t);
  const int64_t groups = (N + kPackedRows - 1) / kPackedRows;
  Tensor p = Tensor::zeros({groups * kPackedRows, K}, dtype_row_packed(t));
  const int64_t ldw = w.strides()[0] / 32 * bb, gb = group_bytes(t, nb);
  const char* src = static_cast<const char*>(w.raw());
  char* dst = static_cast<char*>(p.raw());
#pragma omp parallel for schedule(static) if (N * nb > 65536)
  for (int64_t g = 0; g < groups; ++g)
    for (int r = 0; r < kPackedRows && g * kPackedRows + r < N; ++r)
      for (int64_t b = 0; b < nb; ++b)
        move_block<true>(t, b, r, const_cast<char*>(src + (g * kPackedRows + r) * ldw + b * bb), dst + g * gb);
  return p.slice(0, 0, N);
}

void int8_packed_row(const Tensor& packed, int64_t r, void* dst) {
  TP_CHECK(dtype_is_row_packed(packed.dtype()) && packed.ndim() == 2 && r >= 0 && r < packed.dim(0),
           "[int8_packed_row] row ", r, " of ", packed.describe());
  const DType t = dtype_unpacked(packed.dtype());
  const int64_t nb = packed.dim(1) / 32, bb = dtype_block_bytes(t);
  char* group = const_cast<char*>(static_cast<const char*>(packed.raw())) + r / kPackedRows * group_bytes(t, nb);
  for (int64_t b = 0; b < nb; ++b) move_block<false>(t, b, int(r % kPackedRows), static_cast<char*>(dst) + b * bb, group);
}

Tensor int8_unpack_rows(const Tensor& packed) {
  TP_CHECK(dtype_is_row_packed(packed.dtype()) && packed.ndim() == 2 && packed.strides()[1] == 1,
           "[int8_unpack_rows] got ", packed.describe(), ", expected a row-packed tensor");
  const DType t = dtype_unpacked(packed.dtype());
  const int64_t N = packed.dim(0), row_bytes = dtype_nbytes(t, packed.dim(1));
  Tensor w = Tensor::empty({N, packed.dim(1)}, t);
#pragma omp parallel for schedule(static) if (N * row_bytes > (int64_t(1) << 20))
  for (int64_t r = 0; r < N; ++r) int8_packed_row(packed, r, static_cast<char*>(w.raw()) + r * row_bytes);
  return w;
}

Tensor row_packed_as(const Tensor& w, bool on) {
  if (!w.defined()) return w;
  if (on && int8_packable(w.dtype())) return int8_pack_rows(w);
  if (!on && dtype_is_row_packed(w.dtype())) return int8_unpack_rows(w);
  return w;
}

}  // namespace tensorpar
