// Internal to int8_matmul: the layout of the quantized activations and the tile loop every
// instruction set shares (int8_matmul.cpp quantizes and dispatches; int8_matmul_vnni512.cpp and
// int8_matmul_avx2.cpp hold the inner kernels, compiled with target attributes and picked at run
// time).
//
// Layout. Each input row is quantized once per call into scratch, padded to a multiple of 64
// elements with zeros, beside per-lane side data so that the weight-row loop needs no scalar work
// per activation block: an int32 lane holds the sum of 4 products (VPDPBUSD's grouping, which
// AVX2's VPMADDUBSW + VPMADDWD give too), so 64 elements are 16 lanes and a 32-element block is 8.
// - Legacy weight types (blocks of 32): dx (the block's f16 scale, in each of its 8 lanes),
//   corr (-offset x the lane's 4 activation codes: the weight codes are stored unsigned, code =
//   q + offset, so sum (code - offset) * x = corr + sum code * x), and per block sx = d x sum q
//   (the q4_1 / q5_1 offset term m's factor), and per block the sum of its codes (int32; the
//   row-packed kernels' offset term).
// - K-quants (super-blocks of 256): d (f32), corr lanes as above for Q6_K (codes q + 32), and the
//   sums of each 32 codes (the Q4_K / Q5_K mins term), of each 16 codes (int32; the row-packed
//   Q6_K kernel's offset term).
// Unpacked weight rows (several groups of input rows pass one tile) have one layout for every
// instruction set: per pair of legacy blocks 64 codes and 16 lane scales (128 bytes), per K-quant
// super-block kKBlockBytes (codes, lane scales, mins, d, dmin).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quant.h"
#include "core/tensor.h"
#include "kernels/cpu/int8_packed.h"
#include "kernels/cpu/parallel_if.h"
#include "kernels/cpu/stealing_schedule.h"

namespace tensorpar::int8_detail {

inline constexpr int64_t kChunk = 64;  // activations per 64 int8 codes (16 int32 lanes)
inline constexpr int kRows = 4;        // input rows per register block
// Weight bytes ahead of the current block that the kernels ask the cache for: the hardware
// prefetcher alone leaves a decode-sized stream latency-bound (odd-sized blocks, short rows).
inline constexpr int64_t kPrefetchBytes = 2048;
// Weight rows in tiles (a tile stays in L1 while every group of kRows input rows passes).
inline constexpr int64_t kWTile = 8;
// A K-quant super-block unpacked: 4 x 64 codes, 4 x 16 f32 lane scales, 8 int32 mins, d, dmin.
inline constexpr int64_t kKBlockBytes = 4 * 64 + 4 * 64 + 32 + 32;

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// The unsigned offset of a legacy type's weight codes (code = q + offset, q the signed value).
constexpr int legacy_offset(DType t) {
  return t == DType::kQ4_0 ? 8 : t == DType::kQ5_0 ? 16 : (t == DType::kQ8_0 || t == DType::kIQ4_NL) ? 128 : 0;
}

// Bytes of one legacy weight row unpacked: per pair of blocks the 64 codes and 16 lane scales.
inline int64_t legacy_unpacked_bytes(int64_t nb) { return (nb + 1) / 2 * 128; }

// Where each part of one quantized input row lives in scratch (byte offsets, all 64-aligned).
struct ActLayout {
  int64_t k = 0, kp = 0, row_bytes = 0;
  int64_t off_a = 0, off_b = 0, off_c = 0;  // legacy: dx, corr, sx; K-quants: d, corr (Q6_K), sums32
  int64_t off_d = 0;                         // legacy: the blocks' code sums; K-quants: sums16
};

struct Operands {
  const char* w;
  int64_t ldw;  // bytes between weight rows
  int64_t n, nb;
  const char* act;
  ActLayout l;
  int64_t m;
  float* out;
  int64_t ldo;
  const float* bias;
};

// The whole product of one weight type with one instruction set's kernels.
void run_vnni512(const Operands& o, DType t);
void run_avx2(const Operands& o, DType t);
// The same for row-packed weights (int8_packed.h) of GGUF type t: o.w is the packed tensor.
// AVX-512 VNNI: the 32-weight types; AVX2: every packable type.
void run_packed_vnni512(const Operands& o, DType t);
void run_packed_avx2(const Operands& o, DType t);

// Per-thread scratch of a tile: the legacy offsets (m) and, when several groups of
// input rows pass a tile, its rows unpacked once.
struct TileScratch {
  std::vector<float> m;
  char* unpacked = nullptr;
  int64_t row_bytes = 0;
};

// The tile loop over an instruction set's kernels. K provides kWRows (weight rows per register
// block of the legacy kernel), kStreamsRows (whether it has legacy_stream) and, for weight type T:
//   legacy_dot<T, W, R, kUnpacked>(w, nb, act, layout, m, res): res[i * kRows + r] = input row r .
//     weight row i (i < W, r < R); w[i] the row as stored or (kUnpacked) as legacy_unpack_row wrote
//     it; m[i] its q4_1 / q5_1 offsets (kUnpacked: already there; else written there);
//   legacy_unpack_row<T>(wrow, nb, dst, m); kquant_dot<T, R, kUnpacked>(wrow, nsb, act, layout, res);
//   kquant_unpack_row<T>(wrow, nsb, dst);
//   legacy_stream<T>(w, ldw, rows, nb, act, layout, m, ms, res) (kStreamsRows): one input row
//     against rows <= kWTile weight rows (one tile) as stored, as legacy_dot<T, 1, 1, false> row by row.
// Each (weight row, input row) pair runs the same instructions in the same order whatever its
// block, so a row's result does not depend on the batch or the thread count.
template <class K>
struct Driver {
  // Tile rows [n0, n1) against one group of R input rows.
  template <DType T, int R>
  static void legacy_rows(const Operands& o, int64_t n0, int64_t n1, const char* act, TileScratch& sc, float* res) {
    constexpr int W = K::kWRows;
    const int64_t ms = o.nb + 1;
    if constexpr (R == 1) {
      if (sc.unpacked == nullptr) {  // decode streams one weight row after another
        if constexpr (K::kStreamsRows) {
          K::template legacy_stream<T>(o.w + n0 * o.ldw, o.ldw, int(n1 - n0), o.nb, act, o.l, sc.m.data(), ms, res);
          return;
        }
        for (int64_t n = n0; n < n1; ++n) {
          const char* w = o.w + n * o.ldw;
          float* m = sc.m.data() + (n - n0) * ms;
          K::template legacy_dot<T, 1, 1, false>(&w, o.nb, act, o.l, &m, res + (n - n0) * kRows);
        }
        return;
      }
    }
    for (int64_t n = n0; n < n1; n += W) {  // rows past n1 repeat the last one; their results are dropped
      const char* w[W];
      float* m[W];
      for (int i = 0; i < W; ++i) {
        const int64_t t = std::min(n + i, n1 - 1) - n0;
        w[i] = sc.unpacked ? sc.unpacked + t * sc.row_bytes : o.w + (n0 + t) * o.ldw;
        m[i] = sc.m.data() + t * ms;
      }
      if (sc.unpacked) K::template legacy_dot<T, W, R, true>(w, o.nb, act, o.l, m, res + (n - n0) * kRows);
      else K::template legacy_dot<T, W, R, false>(w, o.nb, act, o.l, m, res + (n - n0) * kRows);
    }
  }

  template <DType T, int R>
  static void kquant_rows(const Operands& o, int64_t n0, int64_t n1, const char* act, const TileScratch& sc,
                          float* res) {
    for (int64_t n = n0; n < n1; ++n) {
      if (sc.unpacked)
        K::template kquant_dot<T, R, true>(sc.unpacked + (n - n0) * sc.row_bytes, o.nb, act, o.l, res + (n - n0) * kRows);
      else
        K::template kquant_dot<T, R, false>(o.w + n * o.ldw, o.nb, act, o.l, res + (n - n0) * kRows);
    }
  }

  template <DType T, int R>
  static void tile_rows(const Operands& o, int64_t n0, int64_t n1, const char* act, TileScratch& sc, float* res) {
    if constexpr (dtype_is_kquant(T)) kquant_rows<T, R>(o, n0, n1, act, sc, res);
    else legacy_rows<T, R>(o, n0, n1, act, sc, res);
  }

  template <DType T>
  static void run(const Operands& o) {
    const int64_t tiles = (o.n + kWTile - 1) / kWTile;
    const bool parallel = o.n * o.l.k * o.m > (int64_t(1) << 16);
    StealingSchedule schedule(tiles, parallel);
    parallel_if(parallel, [&] {
      // Several groups of input rows per tile: its rows are unpacked once.
      const bool unpack = o.m > kRows;
      TileScratch sc;
      sc.m.resize(static_cast<size_t>(kWTile * (o.nb + 1)));
      std::shared_ptr<void> unpacked;
      if (unpack) {
        sc.row_bytes = dtype_is_kquant(T) ? o.nb * kKBlockBytes : legacy_unpacked_bytes(o.nb);
        unpacked = aligned_alloc_shared(kWTile * sc.row_bytes);
      }
      float res[(kWTile + K::kWRows) * kRows];
      schedule.for_each([&](int64_t t) {
        const int64_t n0 = t * kWTile, n1 = std::min(o.n, n0 + kWTile);
        if (unpack) {
          sc.unpacked = static_cast<char*>(unpacked.get());
          for (int64_t n = n0; n < n1; ++n) {
            char* dst = sc.unpacked + (n - n0) * sc.row_bytes;
            if constexpr (dtype_is_kquant(T)) K::template kquant_unpack_row<T>(o.w + n * o.ldw, o.nb, dst);
            else K::template legacy_unpack_row<T>(o.w + n * o.ldw, o.nb, dst, sc.m.data() + (n - n0) * (o.nb + 1));
          }
        }
        for (int64_t m0 = 0; m0 < o.m; m0 += kRows) {
          const int rows = int(std::min<int64_t>(kRows, o.m - m0));
          const char* act = o.act + m0 * o.l.row_bytes;
          switch (rows) {
            case 4: tile_rows<T, 4>(o, n0, n1, act, sc, res); break;
            case 3: tile_rows<T, 3>(o, n0, n1, act, sc, res); break;
            case 2: tile_rows<T, 2>(o, n0, n1, act, sc, res); break;
            default: tile_rows<T, 1>(o, n0, n1, act, sc, res); break;
          }
          for (int64_t n = n0; n < n1; ++n) {
            const float b = o.bias ? o.bias[n] : 0.0f;
            for (int r = 0; r < rows; ++r) o.out[(m0 + r) * o.ldo + n] = res[(n - n0) * kRows + r] + b;
          }
        }
      });
    });
  }

  static void run_type(const Operands& o, DType t) {
    switch (t) {
      case DType::kQ4_0: run<DType::kQ4_0>(o); break;
      case DType::kQ4_1: run<DType::kQ4_1>(o); break;
      case DType::kQ5_0: run<DType::kQ5_0>(o); break;
      case DType::kQ5_1: run<DType::kQ5_1>(o); break;
      case DType::kQ8_0: run<DType::kQ8_0>(o); break;
      case DType::kIQ4_NL: run<DType::kIQ4_NL>(o); break;
      case DType::kQ4_K: run<DType::kQ4_K>(o); break;
      case DType::kQ5_K: run<DType::kQ5_K>(o); break;
      default: run<DType::kQ6_K>(o); break;
    }
  }
};

// The loop of the row-packed kernels: groups of 8 weight rows spread over the threads by a
// StealingSchedule (each thread streams one contiguous stretch; the last one's tail is shared),
// kRows input rows at a time. K provides
// kKQuants (whether it has K-quant kernels) and, for weight type T,
//   group<T, R>(group, nb, act, layout, res): res[r * 8 + i] = input row r . weight row i of the
//   group (r < R), the same instructions for every (weight row, input row) pair whatever the
//   batch, so a row's result does not depend on the batch or the thread count.
template <class K>
struct PackedDriver {
  template <DType T>
  static void run(const Operands& o) {
    const int64_t groups = (o.n + kPackedRows - 1) / kPackedRows, gb = int8_packed::group_bytes(T, o.nb);
    const bool parallel = o.n * o.l.k * o.m > (int64_t(1) << 16);
    StealingSchedule schedule(groups, parallel);
    parallel_if(parallel, [&] {
      schedule.for_each([&](int64_t g) {
        const char* group = o.w + g * gb;
        const int64_t n0 = g * kPackedRows, n1 = std::min(o.n, n0 + kPackedRows);
        float res[kRows * kPackedRows];
        for (int64_t m0 = 0; m0 < o.m; m0 += kRows) {
          const int rows = int(std::min<int64_t>(kRows, o.m - m0));
          const char* act = o.act + m0 * o.l.row_bytes;
          switch (rows) {
            case 4: K::template group<T, 4>(group, o.nb, act, o.l, res); break;
            case 3: K::template group<T, 3>(group, o.nb, act, o.l, res); break;
            case 2: K::template group<T, 2>(group, o.nb, act, o.l, res); break;
            default: K::template group<T, 1>(group, o.nb, act, o.l, res); break;
          }
          for (int r = 0; r < rows; ++r)
            for (int64_t n = n0; n < n1; ++n)
              o.out[(m0 + r) * o.ldo + n] = res[r * kPackedRows + (n - n0)] + (o.bias ? o.bias[n] : 0.0f);
        }
      });
    });
  }

  static void run_type(const Operands& o, DType t) {
    switch (t) {
      case DType::kQ4_0: run<DType::kQ4_0>(o); return;
      case DType::kQ4_1: run<DType::kQ4_1>(o); return;
      case DType::kQ5_0: run<DType::kQ5_0>(o); return;
      case DType::kQ5_1: run<DType::kQ5_1>(o); return;
      case DType::kQ8_0: run<DType::kQ8_0>(o); return;
      case DType::kIQ4_NL: run<DType::kIQ4_NL>(o); return;
      default: break;
    }
    if constexpr (K::kKQuants) {
      switch (t) {
        case DType::kQ4_K: run<DType::kQ4_K>(o); return;
        case DType::kQ5_K: run<DType::kQ5_K>(o); return;
        case DType::kQ6_K: run<DType::kQ6_K>(o); return;
        default: break;
      }
    }
    TP_CHECK(false, "[int8_matmul_forward] no row-packed kernel for ", dtype_name(t), " on this instruction set");
  }
};

}  // namespace tensorpar::int8_detail
