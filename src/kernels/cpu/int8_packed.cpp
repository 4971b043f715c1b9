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

// Row r's 8 source bytes into a register (see int8_packed.h), or back.
template <bool kPack>
void move8(char* reg, int r, char* src) {
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j) {
      char& p = reg[32 * h + 4 * r + j];
      char& q = src[4 * h + j];
      if constexpr (kPack) p = q;
      else q = p;
    }
}

// One bit of a 64-bit mask in a byte array.
bool mask_bit(const uint8_t* masks, int bit) { return masks[bit / 8] >> (bit % 8) & 1; }
void set_mask_bit(uint8_t* masks, int bit, bool v) {
  masks[bit / 8] = uint8_t((masks[bit / 8] & ~(1 << (bit % 8))) | (int(v) << (bit % 8)));
}

// The GGUF encoding of 8 six-bit scales and mins (kquant_scale_min's inverse).
void encode_scales_mins(const int sc[8], const int mn[8], uint8_t s[12]) {
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
    s[j + 4] = uint8_t((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
    s[j + 8] = uint8_t((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
  }
}

// Moves super-block b of row r (GGUF bytes at `blk`) into its group's packed bytes, or back.
template <bool kPack>
void move_kblock(DType t, int64_t b, int r, char* blk, char* group) {
  char* codes = group + b * block_bytes(t);
  char* extras = codes + code_bytes(t);
  auto move = [](char* packed, char* gguf, size_t n) {
    if constexpr (kPack) std::memcpy(packed, gguf, n);
    else std::memcpy(gguf, packed, n);
  };
  if (t == DType::kQ6_K) {
    auto* q = reinterpret_cast<BlockQ6_K*>(blk);
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 4; ++k) {
        char* regs = codes + 192 * (4 * h + k);
        move8<kPack>(regs, r, reinterpret_cast<char*>(q->ql) + 64 * h + 8 * k);
        move8<kPack>(regs + 64, r, reinterpret_cast<char*>(q->ql) + 64 * h + 32 + 8 * k);
        move8<kPack>(regs + 128, r, reinterpret_cast<char*>(q->qh) + 32 * h + 8 * k);
      }
    move(extras + offset_kd(t) + 2 * r, reinterpret_cast<char*>(&q->d), 2);
    for (int j = 0; j < 16; ++j)
      move(extras + offset_kscales(t) + 8 * j + r, reinterpret_cast<char*>(&q->scales[j]), 1);
    return;
  }
  // Q4_K and Q5_K share d, dmin, scales and qs; Q5_K adds qh.
  uint8_t* qs = t == DType::kQ4_K ? reinterpret_cast<BlockQ4_K*>(blk)->qs : reinterpret_cast<BlockQ5_K*>(blk)->qs;
  auto* head = reinterpret_cast<BlockQ4_K*>(blk);  // d, dmin, scales: the same offsets in both
  for (int c = 0; c < 4; ++c)
    for (int k = 0; k < 4; ++k) move8<kPack>(codes + 64 * (4 * c + k), r, reinterpret_cast<char*>(qs) + 32 * c + 8 * k);
  move(extras + offset_kd(t) + 2 * r, reinterpret_cast<char*>(&head->d), 2);
  move(extras + offset_kdmin(t) + 2 * r, reinterpret_cast<char*>(&head->dmin), 2);
  auto* enc = reinterpret_cast<uint8_t*>(extras + offset_kscales(t));
  int sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    const int p = 8 * j + r;
    uint8_t& lo = enc[p];
    uint8_t& hi = enc[64 + p % 32];
    const int shift = 4 * (p / 32);
    if constexpr (kPack) {
      kquant_scale_min(head->scales, j, sc[j], mn[j]);
      lo = uint8_t((sc[j] & 15) | (mn[j] & 15) << 4);
      hi = uint8_t((hi & ~(15 << shift)) | ((sc[j] >> 4) | (mn[j] >> 4) << 2) << shift);
    } else {
      const int h = hi >> shift & 15;
      sc[j] = (lo & 15) | (h & 3) << 4;
      mn[j] = (lo >> 4) | (h >> 2) << 4;
    }
  }
  if constexpr (!kPack) encode_scales_mins(sc, mn, head->scales);
  if (t != DType::kQ5_K) return;
  auto* qh = reinterpret_cast<BlockQ5_K*>(blk)->qh;
  auto* masks = reinterpret_cast<uint8_t*>(extras);
  for (int c = 0; c < 4; ++c)
    for (int k = 0; k < 4; ++k)
      for (int n = 0; n < 2; ++n)
        for (int h = 0; h < 2; ++h)
          for (int j = 0; j < 4; ++j) {
            uint8_t* mask = masks + 8 * (2 * (4 * c + k) + n);
            const int bit = 32 * h + 4 * r + j, l = 8 * k + 4 * h + j, sub = 2 * c + n;
            if constexpr (kPack) {
              set_mask_bit(mask, bit, qh[l] >> sub & 1);
            } else {
              qh[l] = uint8_t((qh[l] & ~(1 << sub)) | int(mask_bit(mask, bit)) << sub);
            }
          }
}

// One block of row r, either family.
template <bool kPack>
void move_any(DType t, int64_t b, int r, char* blk, char* group) {
  if (dtype_is_kquant(t)) move_kblock<kPack>(t, b, r, blk, group);
  else move_block<kPack>(t, b, r, blk, group);
}

}  // namespace

Tensor int8_pack_rows(const Tensor& w) {
  const DType t = w.dtype();
  const int64_t be = dtype_block_elems(t);
  TP_CHECK(int8_packable(t) && w.ndim() == 2 && w.strides()[1] == 1 && w.strides()[0] % be == 0,
           "[int8_pack_rows] got ", w.describe(), ", expected a 2-D q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl, q4_k, "
           "q5_k or q6_k tensor with whole blocks per row");
  const int64_t N = w.dim(0), K = w.dim(1), nb = K / be, bb = dtype_block_bytes(t);
  const int64_t groups = (N + kPackedRows - 1) / kPackedRows;
  Tensor p = Tensor::zeros({groups * kPackedRows, K}, dtype_row_packed(t));
  const int64_t ldw = w.strides()[0] / be * bb, gb = group_bytes(t, nb);
  const char* src = static_cast<const char*>(w.raw());
  char* dst = static_cast<char*>(p.raw());
#pragma omp parallel for schedule(static) if (N * nb > 65536)
  for (int64_t g = 0; g < groups; ++g)
    for (int r = 0; r < kPackedRows && g * kPackedRows + r < N; ++r)
      for (int64_t b = 0; b < nb; ++b)
        move_any<true>(t, b, r, const_cast<char*>(src + (g * kPackedRows + r) * ldw + b * bb), dst + g * gb);
  return p.slice(0, 0, N);
}

void int8_packed_row(const Tensor& packed, int64_t r, void* dst) {
  TP_CHECK(dtype_is_row_packed(packed.dtype()) && packed.ndim() == 2 && r >= 0 && r < packed.dim(0),
           "[int8_packed_row] row ", r, " of ", packed.describe());
  const DType t = dtype_unpacked(packed.dtype());
  const int64_t nb = packed.dim(1) / dtype_block_elems(t), bb = dtype_block_bytes(t);
  char* group = const_cast<char*>(static_cast<const char*>(packed.raw())) + r / kPackedRows * group_bytes(t, nb);
  for (int64_t b = 0; b < nb; ++b) move_any<false>(t, b, int(r % kPackedRows), static_cast<char*>(dst) + b * bb, group);
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

}  // namespace tensorpar
