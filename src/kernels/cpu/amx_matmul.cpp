// AMX bf16 matmul (see amx_matmul.h). The product is computed transposed, C^T (N,M) = W (N,K) x
// X^T (K,M): the weight rows are then the A tiles (16 rows of 32 bf16, loaded in place with the
// weight's row stride) and the activations the B tiles, packed once per call in the VNNI layout
// the instruction wants (for each pair of k, 16 rows' two values side by side). A thread takes 32
// weight rows at a time (two A tiles) against 32 activation rows (two B tiles) into four C tiles,
// walking K in chunks of 32; the C tiles are then stored and written out transposed.
// Tails: weight rows past the last full 16 and the K chunk past the last full 32 are copied into
// zero-padded buffers, so no tile load reads outside the weight; activation rows past M are zeros.
#include "kernels/cpu/amx_matmul.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu/bf16_operands.h"
#include "kernels/cpu/parallel_if.h"
#include "kernels/cpu/stealing_schedule.h"

namespace tensorpar {

namespace {

constexpr int kTileRows = 16;   // rows of every tile
constexpr int kTileK = 32;      // bf16 values of K per tile row (64 bytes)
constexpr int kTileBytes = 64;  // bytes per tile row

bool cpu_has_amx_bf16() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
  return amx_bf16 && amx_tile;
}

// Linux keeps the 8 KB tile data state off until a process asks (kernel 5.16+).
bool request_tile_data() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// The tile configuration (palette 1): every tile 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

using Operands = Bf16Operands;
constexpr auto round_up = round_up_to;

// Packed activations: [M / 16 blocks][K / 2 pairs][16 rows][2] bf16, zero past M and K.
void pack_activations(const Operands& o, uint16_t* xb) {
  const int64_t mblocks = round_up(o.M, kTileRows) / kTileRows, pairs = round_up(o.K, kTileK) / 2;
  parallel_if(o.M * o.K > (int64_t(1) << 16), [&] {
#pragma omp for schedule(static)
    for (int64_t mb = 0; mb < mblocks; ++mb) {
      uint16_t* dst = xb + mb * pairs * kTileRows * 2;
      std::memset(dst, 0, size_t(pairs * kTileRows * 2) * sizeof(uint16_t));
      for (int r = 0; r < kTileRows; ++r) {
        const int64_t m = mb * kTileRows + r;
        if (m >= o.M) break;
        const float* x = o.x + m * o.ldx;
        for (int64_t k = 0; k < o.K; ++k) dst[(k / 2) * kTileRows * 2 + r * 2 + (k & 1)] = f32_to_bf16(x[k]).bits;
      }
    }
  });
}

#define TP_AMX __attribute__((target("amx-tile,amx-bf16,avx512f")))

// One tile job: NB weight blocks of 16 rows (A tiles 4, 5) x MB activation blocks of 16 rows
// (B tiles 6, 7) into C tiles 0 (n0,m0), 1 (n0,m1), 2 (n1,m0), 3 (n1,m1).
struct Job {
  const uint16_t* a[2];  // each A block's rows at k = 0
  int64_t lda[2];        // in elements
  int64_t n0;            // first weight row
  int64_t m0;            // first activation row (a multiple of 16)
};

template <int NB, int MB>
TP_AMX void tile_job(const Operands& o, const Job& j, const uint16_t* xb, uint16_t* k_tail) {
  const int64_t pairs = round_up(o.K, kTileK) / 2;
  const int64_t full_k = o.K / kTileK * kTileK;
  const uint16_t* b0 = xb + (j.m0 / kTileRows) * pairs * kTileRows * 2;
  const uint16_t* b1 = b0 + pairs * kTileRows * 2;
  _tile_zero(0);
  if (MB == 2) _tile_zero(1);
  if (NB == 2) _tile_zero(2);
  if (NB == 2 && MB == 2) _tile_zero(3);
  for (int64_t k0 = 0; k0 < o.K; k0 += kTileK) {
    const uint16_t* a0 = j.a[0] + k0;
    const uint16_t* a1 = NB == 2 ? j.a[1] + k0 : nullptr;
    int64_t s0 = j.lda[0] * 2, s1 = NB == 2 ? j.lda[1] * 2 : 0;
    if (k0 >= full_k) {  // the last, partial chunk of K: zero-padded copies of its columns
      const int64_t kk = o.K - k0;
      for (int b = 0; b < NB; ++b) {
        uint16_t* t = k_tail + b * kTileRows * kTileK;
        std::memset(t, 0, kTileRows * kTileBytes);
        for (int r = 0; r < kTileRows; ++r)
          std::memcpy(t + r * kTileK, j.a[b] + r * j.lda[b] + k0, size_t(kk) * sizeof(uint16_t));
      }
      a0 = k_tail, s0 = kTileBytes;
      if (NB == 2) a1 = k_tail + kTileRows * kTileK, s1 = kTileBytes;
    }
    _tile_loadd(4, a0, s0);
    if (NB == 2) _tile_loadd(5, a1, s1);
    _tile_loadd(6, b0 + (k0 / 2) * kTileRows * 2, kTileBytes);
    if (MB == 2) _tile_loadd(7, b1 + (k0 / 2) * kTileRows * 2, kTileBytes);
    _tile_dpbf16ps(0, 4, 6);
    if (MB == 2) _tile_dpbf16ps(1, 4, 7);
    if (NB == 2) _tile_dpbf16ps(2, 5, 6);
    if (NB == 2 && MB == 2) _tile_dpbf16ps(3, 5, 7);
  }
  // C tile (i, c) holds out[m0 + 16 c + col][n0 + 16 i + row].
  alignas(64) float c[4][kTileRows * kTileRows];
  _tile_stored(0, c[0], kTileBytes);
  if (MB == 2) _tile_stored(1, c[1], kTileBytes);
  if (NB == 2) _tile_stored(2, c[2], kTileBytes);
  if (NB == 2 && MB == 2) _tile_stored(3, c[3], kTileBytes);
  for (int i = 0; i < NB; ++i)
    for (int cm = 0; cm < MB; ++cm) {
      const float* t = c[i * 2 + cm];
      for (int col = 0; col < kTileRows; ++col) {
        const int64_t m = j.m0 + cm * kTileRows + col;
        if (m >= o.M) break;
        float* out = o.out + m * o.ldo;
        for (int row = 0; row < kTileRows; ++row) {
          const int64_t n = j.n0 + i * kTileRows + row;
          if (n >= o.N) break;
          out[n] = t[row * kTileRows + col] + (o.bias ? o.bias[n] : 0.0f);
        }
      }
    }
}

// The tile intrinsics live in functions of their own: clang's OpenMP outlining does not carry a
// target attribute into the parallel region's body.
// A constant in memory: the compilers' _tile_loadconfig names only the first 8 bytes of its
// operand, so the stores of a local configuration may be dropped as dead.
constexpr TileConfig make_tile_config() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = kTileBytes, cfg.rows[t] = kTileRows;
  return cfg;
}
const TileConfig kTileConfig = make_tile_config();

TP_AMX void configure_tiles() {
  _tile_loadconfig(&kTileConfig);
}

TP_AMX void release_tiles() {
  _tile_release();
}

void run(const Operands& o, uint16_t* xb, const uint16_t* n_tail) {
  const int64_t nblocks = round_up(o.N, kTileRows) / kTileRows, full_n = o.N / kTileRows;
  const int64_t mblocks = round_up(o.M, kTileRows) / kTileRows;
  const int64_t jobs_n = (nblocks + 1) / 2;  // pairs of weight blocks
  const int64_t tail_ld = round_up(o.K, kTileK);
  // Each thread streams its own stretch of weight rows; a late thread's tail is shared.
  const bool parallel = o.N * o.K * std::max<int64_t>(1, o.M) > (int64_t(1) << 16);
  StealingSchedule schedule(jobs_n, parallel);
  parallel_if(parallel, [&] {
    configure_tiles();
    alignas(64) uint16_t k_tail[2 * kTileRows * kTileK];
    schedule.for_each([&](int64_t jn) {
      Job j{};
      j.n0 = jn * 2 * kTileRows;
      const int nb = int(std::min<int64_t>(2, nblocks - jn * 2));
      for (int b = 0; b < nb; ++b) {
        const int64_t block = jn * 2 + b;
        if (block < full_n) {
          j.a[b] = o.w + block * kTileRows * o.ldw, j.lda[b] = o.ldw;
        } else {
          j.a[b] = n_tail, j.lda[b] = tail_ld;
        }
      }
      for (int64_t mb = 0; mb < mblocks; mb += 2) {
        j.m0 = mb * kTileRows;
        const bool two_m = mb + 1 < mblocks;
        if (nb == 2 && two_m)
          tile_job<2, 2>(o, j, xb, k_tail);
        else if (nb == 2)
          tile_job<2, 1>(o, j, xb, k_tail);
        else if (two_m)
          tile_job<1, 2>(o, j, xb, k_tail);
        else
          tile_job<1, 1>(o, j, xb, k_tail);
      }
    });
    release_tiles();
  });
}

}  // namespace

bool amx_bf16_usable() {
  static const bool usable = [] {
    return cpu_has_amx_bf16() && request_tile_data();
  }();
  return usable;
}

int64_t amx_bf16_scratch_bytes(int64_t M, int64_t K) {
  return round_up(std::max<int64_t>(M, 1), kTileRows) * round_up(K, kTileK) * int64_t(sizeof(uint16_t));
}

void amx_bf16_matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias, void* scratch) {
  const Operands o = check_bf16_operands(out, in, weight, bias, scratch, "amx_bf16_matmul_forward");
  if (o.M == 0 || o.N == 0) return;
  TP_CHECK(amx_bf16_usable(), "[amx_bf16_matmul_forward] this CPU or kernel does not allow AMX bf16 tiles");
  TP_CHECK(scratch, "[amx_bf16_matmul_forward] no scratch");
  if (o.K == 0) {
    for (int64_t m = 0; m < o.M; ++m)
      for (int64_t n = 0; n < o.N; ++n) o.out[m * o.ldo + n] = o.bias ? o.bias[n] : 0.0f;
    return;
  }
  uint16_t* xb = static_cast<uint16_t*>(scratch);
  pack_activations(o, xb);
  // Weight rows past the last full block of 16, zero-padded to 16 rows and whole K chunks.
  std::vector<uint16_t> n_tail;
  const int64_t rest = o.N % kTileRows;
  if (rest) {
    const int64_t ld = round_up(o.K, kTileK);
    n_tail.assign(size_t(kTileRows * ld), 0);
    for (int64_t r = 0; r < rest; ++r)
      std::memcpy(n_tail.data() + r * ld, o.w + (o.N - rest + r) * o.ldw, size_t(o.K) * sizeof(uint16_t));
  }
  run(o, xb, n_tail.data());
}

void bf16_rounded_matmul_naive(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias) {
  const Operands o = check_bf16_operands(out, in, weight, bias, nullptr, "bf16_rounded_matmul_naive");
  for (int64_t m = 0; m < o.M; ++m)
    for (int64_t n = 0; n < o.N; ++n) {
      double s = o.bias ? double(o.bias[n]) : 0.0;
      for (int64_t k = 0; k < o.K; ++k)
        s += double(bf16_to_f32(f32_to_bf16(o.x[m * o.ldx + k]))) * double(bf16_to_f32(bf16{o.w[n * o.ldw + k]}));
      o.out[m * o.ldo + n] = float(s);
    }
}

}  // namespace tensorpar
