// `tensorpar bench gemm`: GFLOP/s of our matmul_forward on tensor-parallel shard shapes, beside a
// raw oneDNN matmul primitive (created and run here, no wrapper) on the same problem and layout,
// and the machine peak measured in the same run: a large square oneDNN matmul (f32 and bf16)
// plus an FMA-instruction loop (the physical limit). Medians of 7 interleaved samples.
#include "gemm_bench.h"

// GCC 12 falsely flags the intrinsic headers' own undefined-vector idiom in target-attribute
// functions (its bug 105593); the warning is about the header, not our code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <dnnl.hpp>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/quant.h"
#include "core/tensor.h"
#include "core/threading.h"
#include "kernels/cpu/amx_matmul.h"
#include "kernels/cpu/avx512bf16_matmul.h"
#include "kernels/cpu/panel_matmul.h"
#include "kernels/cpu/int8_matmul.h"
#include "kernels/cpu/int8_packed.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_matmul_kernels.h"
#include "kernels/cpu/rowwise_matmul.h"
#include "median.h"
#include "measure.h"

namespace tensorpar {

namespace {

struct GemmBenchOptions {
  bool json = false;
  bool quick = false;
  bool inference = false;
  bool quant = false;
  int threads = 0;
  std::vector<int64_t> rows;  // the row counts M (default: 1, 16, 512; --quant 1, 4, 16, 64, 256)
  std::vector<std::string> types;  // --quant: the weight types (default: q4_0 q4_1 q5_0 q8_0 q4_k q6_k)
};


// A direct oneDNN matmul: dst (M,N) = src (M,K) x W^T with W (N,K) row-major, i.e. the same
// plain layouts our wrapper hands to oneDNN. No caching, no checks: the peer figure.
class RawOnednn {
 public:
  RawOnednn(int64_t M, int64_t N, int64_t K, DType dt) {
    using dnnl::memory;
    const auto t = dt == DType::kBF16 ? memory::data_type::bf16 : memory::data_type::f32;
    const memory::desc src({M, K}, t, memory::dims{K, 1});
    const memory::desc wei({K, N}, t, memory::dims{1, K});
    const memory::desc dst({M, N}, memory::data_type::f32, memory::dims{N, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), engine_);
    prim_ = dnnl::matmul(pd);
    src_ = memory(src, engine_, DNNL_MEMORY_NONE);
    wei_ = memory(wei, engine_, DNNL_MEMORY_NONE);
    dst_ = memory(dst, engine_, DNNL_MEMORY_NONE);
  }
  void run(const void* src, const void* wei, void* dst) {
    src_.set_data_handle(const_cast<void*>(src));
    wei_.set_data_handle(const_cast<void*>(wei));
    dst_.set_data_handle(dst);
    prim_.execute(stream_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, wei_}, {DNNL_ARG_DST, dst_}});
    stream_.wait();
  }

 private:
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  dnnl::matmul prim_;
  dnnl::memory src_, wei_, dst_;
};

// ---- FMA-instruction peak: independent accumulator chains in registers, all threads ----

constexpr int kChains = 12;

__attribute__((target("avx512f"))) float fma_loop_avx512(int64_t iters) {
  __m512 acc[kChains];
  for (auto& a : acc) a = _mm512_set1_ps(0.5f);
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-3f);
  for (int64_t i = 0; i < iters; ++i)
    for (auto& a : acc) a = _mm512_fmadd_ps(a, x, y);
  __m512 s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm512_add_ps(s, acc[j]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(int64_t iters) {
  __m256 acc[kChains];
  for (auto& a : acc) a = _mm256_set1_ps(0.5f);
  const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-3f);
  for (int64_t i = 0; i < iters; ++i)
    for (auto& a : acc) a = _mm256_fmadd_ps(a, x, y);
  __m256 s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm256_add_ps(s, acc[j]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}

__attribute__((target("avx512f,avx512bf16"))) float dpbf16_loop(int64_t iters) {
  __m512 acc[kChains];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80);  // 1.0
  const __m512bh y = (__m512bh)_mm512_set1_epi16(0x3a83);  // ~1e-3
  for (int64_t i = 0; i < iters; ++i)
    for (auto& a : acc) a = _mm512_dpbf16_ps(a, x, y);
  __m512 s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm512_add_ps(s, acc[j]);
  return _mm512_reduce_add_ps(s);
}

// GFLOP/s of the widest FMA this CPU has (bf16: the AVX512-BF16 dot product; 0 if absent).
double fma_peak_gflops(bool bf16) {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (bf16 && !__builtin_cpu_supports("avx512bf16")) return 0.0;
  if (!bf16 && !__builtin_cpu_supports("avx2")) return 0.0;
  const int64_t iters = int64_t(1) << 21;
  const double flops_per_iter = bf16 ? kChains * 64.0 : kChains * (avx512 ? 32.0 : 16.0);
  int team = 1;
  volatile float sink = 0;
  const double s = seconds_per_call([&] {
#pragma omp parallel
    {
#pragma omp single
      team = current_num_threads();
      const float r = bf16 ? dpbf16_loop(iters) : avx512 ? fma_loop_avx512(iters) : fma_loop_avx2(iters);
      if (r == 12345.0f) sink = r;
    }
  });
  (void)sink;
  return double(team) * double(iters) * flops_per_iter / s * 1e-9;
}

// ---- one benchmark row ----

struct Row {
  std::string dtype;
  int64_t m, n, k;
  double ours, onednn, peak, fma_peak;
  double train = 0;  // f32, 64+ rows: 3 x FLOPs / (forward + backward data and weight gradients)
};

void print_row(const Row& r, bool json) {
  if (json) {
    std::printf("{\"bench\":\"gemm\",\"dtype\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,"
                "\"gflops\":%.2f,\"onednn_gflops\":%.2f,\"peak_gflops\":%.2f",
                r.dtype.c_str(), (long long)r.m, (long long)r.n, (long long)r.k, r.ours, r.onednn,
                r.peak);
    if (r.fma_peak > 0) std::printf(",\"fma_peak_gflops\":%.2f", r.fma_peak);
    if (r.train > 0) std::printf(",\"train_gflops\":%.2f", r.train);
    std::printf("}\n");
  } else {
    std::printf("%-5s %5lld %5lld %5lld %10.1f %10.1f %7.2f %9.1f %7.2f\n", r.dtype.c_str(),
                (long long)r.m, (long long)r.n, (long long)r.k, r.ours, r.onednn,
                r.ours / r.onednn, r.peak, r.ours / r.peak);
  }
  std::fflush(stdout);
}

// The last-level cache's bytes as Linux reports them (index3, else the highest index), or 32 MiB.
int64_t last_level_cache_bytes() {
  for (int index = 3; index >= 2; --index) {
    std::FILE* f = std::fopen(("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size").c_str(), "r");
    if (!f) continue;
    long long v = 0;
    char unit = 0;
    const int got = std::fscanf(f, "%lld%c", &v, &unit);
    std::fclose(f);
    if (got >= 1 && v > 0) return v << (unit == 'K' ? 10 : unit == 'M' ? 20 : 0);
  }
  return int64_t(32) << 20;
}

// Weight copies for small M: decode streams weights from memory, so we rotate through enough
// copies (twice the last-level cache, at most 64 copies) that no call finds its weight in cache.
int64_t weight_copies(int64_t m, int64_t weight_bytes) {
  if (m > 16) return 1;
  static const int64_t llc = last_level_cache_bytes();
  return std::clamp<int64_t>(2 * llc / std::max<int64_t>(1, weight_bytes) + 1, 1, 64);
}

std::vector<Tensor> copies_of(const Tensor& w, int64_t n) {
  std::vector<Tensor> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(w.clone());
  return v;
}

// GFLOP/s of our matmul_forward and of raw oneDNN for out (M,N) = in (M,K) x W^T.
Row bench_shape(MatmulEngine& eng, DType wt, int64_t M, int64_t N, int64_t K, uint64_t seed) {
  // Activations: bf16 beside 16-bit and quantized weights, where oneDNN (the peer) multiplies bf16.
  const DType at = wt == DType::kF32 || !onednn_has_bf16_matmul() ? DType::kF32 : DType::kBF16;
  const std::vector<float> wv = random_values(N * K, seed), xv = random_values(M * K, seed + 1);
  const Tensor in = Tensor::from_f32({M, K}, xv, at);
  Tensor out = Tensor::zeros({M, N}, DType::kF32);
  Tensor w_float = Tensor::from_f32({N, K}, wv, at);  // the raw oneDNN operand (f32 or bf16)
  Tensor w = w_float;  // ours: the weight in its own type
  if (dtype_is_quantized(wt)) {
    w = Tensor::empty({N, K}, wt);
    quantize_row(w.raw(), wv.data(), wt, N * K);
  } else if (wt != at) {
    w = Tensor::from_f32({N, K}, wv, wt);
  }
  const double flops = 2.0 * double(M) * double(N) * double(K);
  Row row{std::string(dtype_name(wt)), M, N, K, 0, 0, 0, 0};
  const std::vector<Tensor> ws = copies_of(w, weight_copies(M, w.nbytes()));
  const std::vector<Tensor> wf = copies_of(w_float, weight_copies(M, w_float.nbytes()));
  RawOnednn raw(M, N, K, at);
  size_t i = 0, j = 0;
  const auto [ours_s, raw_s] = paired_seconds_per_call(
      [&] { matmul_forward(eng, out, in, ws[i++ % ws.size()], nullptr); },
      [&] { raw.run(in.raw(), wf[j++ % wf.size()].raw(), out.raw()); });
  row.ours = flops / ours_s * 1e-9;
  row.onednn = flops / raw_s * 1e-9;
  if (wt == DType::kF32 && M >= 64) {
    // A training step's three GEMMs of this layer: forward, then the input and weight gradients
    // (other layouts, so other speeds); what the planner's training model multiplies by.
    const Tensor d_out = Tensor::from_f32({M, N}, random_values(M * N, seed + 2), DType::kF32);
    Tensor d_in = Tensor::zeros({M, K}, DType::kF32), d_w = Tensor::zeros({N, K}, DType::kF32);
    const double bwd_s = seconds_per_call([&] { matmul_backward(eng, &d_in, &d_w, nullptr, d_out, in, w); });
    row.train = 3 * flops / (ours_s + bwd_s) * 1e-9;
  }
  return row;
}

struct NK {
  int64_t n, k;
};

// The instruction set rowwise_matmul_forward runs on this CPU.
const char* rowwise_isa() {
  return quant_detail::cpu_has_avx512() ? "AVX-512" : quant_detail::cpu_has_avx2() ? "AVX2" : "portable";
}

// --inference: the batch-invariant kernels inference multiplies float weights with, side by side
// on the 0.7B decode model's shapes (fused q/k/v, fused gate/up, down; tp 1): the row-wise kernel
// (AVX-512 or AVX2, f32 activations), the panel kernel (AVX2, f32 activations, the weights in
// K-major panels: panel_matmul.h), and for bf16 weights the AVX512-BF16 dot kernel and the AMX
// tile kernel (bf16 activations) where the CPU has them. Weight GB/s (weight bytes / time: what
// decode is bound by) and GFLOP/s. Weights bf16 unless --types names f32 / bf16 / f16.
void run_inference_bench(const GemmBenchOptions& opt) {
  apply_rank_threads(plan_rank_threads(0, 1, opt.threads));
  std::vector<DType> types;
  for (const std::string& name : opt.types) {
    const DType t = dtype_from_name(name);
    TP_CHECK(dtype_is_float(t), "[bench gemm --inference] --types ", name, ": expected f32, bf16 or f16");
    types.push_back(t);
  }
  if (types.empty()) types = {DType::kBF16};
  const bool panels = panels_usable();
  const auto has = [](bool on, const char* what) { return on ? what : "not on this CPU"; };
  std::vector<NK> shapes = {{3072, 2048}, {11264, 2048}, {2048, 5632}};
  std::vector<int64_t> ms = {1, 4, 16, 64, 256, 840};
  if (!opt.rows.empty()) ms = opt.rows;
  if (opt.quick) shapes = {{1536, 576}}, ms = {1, 16};
  uint64_t seed = 500;
  for (const DType t : types) {
    const bool bf16 = t == DType::kBF16;
    const bool amx = bf16 && amx_bf16_usable(), dot = bf16 && avx512_bf16_usable();
    std::printf("inference %s weights, %d thread(s): rowwise (%s, f32 activations), panels (%s), avx512bf16 (%s), "
                "amx (%s); GB/s of weights and GFLOP/s, medians of 7 samples\n",
                std::string(dtype_name(t)).c_str(), current_num_threads(), rowwise_isa(),
                has(panels, "AVX2, f32 activations"), has(dot, "bf16 activations"), has(amx, "bf16 activations"));
    std::printf("%5s %6s %5s %14s %14s %14s %14s\n", "M", "N", "K", "rowwise GB|GF", "panels GB|GF", "bf16dot GB|GF",
                "amx GB|GF");
    for (const int64_t M : ms)
      for (const NK s : shapes) {
        const int64_t N = s.n, K = s.k;
        const Tensor in = Tensor::from_f32({M, K}, random_values(M * K, ++seed), DType::kF32);
        const Tensor w = Tensor::from_f32({N, K}, random_values(N * K, ++seed), t);
        Tensor out = Tensor::zeros({M, N}, DType::kF32);
        const std::vector<Tensor> ws = copies_of(w, weight_copies(M, w.nbytes()));
        std::vector<Tensor> packed;
        if (panels)
          for (const Tensor& c : ws) packed.push_back(pack_panels(c));
        const std::shared_ptr<void> scratch =
            aligned_alloc_shared(std::max(amx_bf16_scratch_bytes(M, K), avx512bf16_scratch_bytes(M, K)));
        size_t i = 0;
        auto row_s = [&] { return seconds_per_call([&] { rowwise_matmul_forward(out, in, ws[i++ % ws.size()], nullptr); }); };
        auto panel_s = [&] {
          return seconds_per_call([&] { panel_matmul_forward(out, in, packed[i++ % packed.size()], nullptr); });
        };
        auto dot_s = [&] {
          return seconds_per_call(
              [&] { avx512bf16_matmul_forward(out, in, ws[i++ % ws.size()], nullptr, scratch.get()); });
        };
        auto amx_s = [&] {
          return seconds_per_call([&] { amx_bf16_matmul_forward(out, in, ws[i++ % ws.size()], nullptr, scratch.get()); });
        };
        const double gb = double(w.nbytes()) * 1e-9, gf = 2.0 * double(M * N * K) * 1e-9;
        const double secs[4] = {row_s(), panels ? panel_s() : 0.0, dot ? dot_s() : 0.0, amx ? amx_s() : 0.0};
        std::printf("%5lld %6lld %5lld", (long long)M, (long long)N, (long long)K);
        for (double x : secs) {
          if (x > 0)
            std::printf(" %6.1f|%7.1f", gb / x, gf / x);
          else
            std::printf(" %14s", "-");
        }
        std::printf("\n");
        std::fflush(stdout);
      }
  }
}

// A block-quantized (N,K) weight for speed runs: legacy types quantized from random values; the
// K-quants (no quantizer here) random bytes with their f16 scale fields set to small normal
// values, so that no NaN or subnormal scale changes the float path's speed.
Tensor random_quant_weight(DType t, int64_t N, int64_t K, uint64_t seed) {
  Tensor w = Tensor::empty({N, K}, t);
  if (!dtype_is_kquant(t)) {
    const std::vector<float> v = random_values(N * K, seed);
    quantize_row(w.raw(), v.data(), t, N * K);
    return w;
  }
  auto* p = static_cast<uint8_t*>(w.raw());
  const std::vector<float> v = random_values(w.nbytes(), seed);
  for (int64_t i = 0; i < w.nbytes(); ++i) p[i] = uint8_t(int(v[size_t(i)] * 127.0f) & 0xff);
  const std::vector<int> scale_offsets = t == DType::kQ6_K ? std::vector<int>{208} : std::vector<int>{0, 2};
  const uint16_t h = f32_to_f16(0.001f).bits;
  for (int64_t b = 0; b < w.nbytes() / dtype_block_bytes(t); ++b)
    for (int off : scale_offsets) std::memcpy(p + b * dtype_block_bytes(t) + off, &h, 2);
  return w;
}

// --quant: the batch-invariant inference kernels for GGUF weights side by side: row-wise AVX-512
// or AVX2 (weights dequantized in registers or an L1 buffer, f32 activations) and the int8 kernel
// (activations rounded to 8 bits, VNNI or AVX2 integer dots). Shapes: the default model's (C 576, F 1536)
// and the 0.7B's (fused q/k/v 3072 x 2048, fused gate/up 11264 x 2048, down 2048 x 5632).
// Weight GB/s (the quantized bytes / time: what decode is bound by) and GFLOP/s.
void run_quant_bench(const GemmBenchOptions& opt) {
  apply_rank_threads(plan_rank_threads(0, 1, opt.threads));
  if (!opt.json) {
    const std::vector<Int8Kernel> int8 = int8_matmul_kernels();
    std::printf("inference GGUF weights, %d thread(s): rowwise (%s, f32 activations) and int8 (%s); "
                "GB/s of weights and GFLOP/s, medians of 7 interleaved samples\n",
                current_num_threads(), rowwise_isa(),
                int8.empty() ? "not on this CPU" : int8_kernel_name(int8.front()));
    std::printf("%-5s %5s %6s %5s %14s %14s %7s %14s %7s\n", "type", "M", "N", "K", "rowwise GB|GF", "int8 GB|GF",
                "speedup", "packed GB|GF", "/int8");
  }
  std::vector<NK> shapes = {{1536, 576}, {576, 1536}, {3072, 2048}, {11264, 2048}, {2048, 5632}};
  std::vector<int64_t> ms = opt.rows.empty() ? std::vector<int64_t>{1, 4, 16, 64, 256} : opt.rows;
  std::vector<DType> types = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K};
  if (opt.quick) shapes = {{1536, 576}}, ms = {1, 16}, types = {DType::kQ4_0, DType::kQ4_K};
  if (!opt.types.empty()) {
    types.clear();
    for (const std::string& name : opt.types) {
      const DType t = dtype_from_name(name);
      TP_CHECK(dtype_is_quantized(t), "[bench gemm --quant] --types ", name, ": not a GGUF block-quantized type");
      types.push_back(t);
    }
  }
  uint64_t seed = 900;
  for (const DType t : types)
    for (const int64_t M : ms)
      for (const NK s : shapes) {
        const int64_t N = s.n, K = s.k;
        if (K % dtype_block_elems(t) != 0) continue;
        const Tensor in = Tensor::from_f32({M, K}, random_values(M * K, ++seed), DType::kF32);
        const Tensor w = random_quant_weight(t, N, K, ++seed);
        Tensor out = Tensor::zeros({M, N}, DType::kF32);
        const std::vector<Tensor> ws = copies_of(w, weight_copies(M, w.nbytes()));
        const std::shared_ptr<void> scratch = aligned_alloc_shared(int8_matmul_scratch_bytes(M, K, t));
        size_t i = 0;
        auto row = [&] { rowwise_matmul_forward(out, in, ws[i++ % ws.size()], nullptr); };
        auto int8 = [&] { int8_matmul_forward(out, in, ws[i++ % ws.size()], nullptr, scratch.get()); };
        double tr, ti = 0, tp = 0, ti2 = 0;
        if (int8_matmul_usable(t)) std::tie(tr, ti) = paired_seconds_per_call(row, int8);
        else tr = seconds_per_call(row);
        if (int8_packable(t) && int8_matmul_usable(dtype_row_packed(t))) {
          // The row-packed layout (which inference keeps where int8_packed_rows_preferred says),
          // against the GGUF layout's kernel in one more interleaved pair.
          std::vector<Tensor> wp;
          for (const Tensor& c : ws) wp.push_back(int8_pack_rows(c));
          auto packed = [&] { int8_matmul_forward(out, in, wp[i++ % wp.size()], nullptr, scratch.get()); };
          std::tie(ti2, tp) = paired_seconds_per_call(int8, packed);
        }
        const double gb = double(w.nbytes()) * 1e-9, gf = 2.0 * double(M * N * K) * 1e-9;
        if (opt.json) {
          // The kernel inference uses by default (what plan --calibrate reads): the row-packed
          // layout where inference keeps it, else int8 where the CPU has it, else row-wise.
          const double t_default = tp > 0 && int8_packed_rows_preferred(t) ? tp : ti > 0 ? ti : tr;
          std::printf("{\"bench\":\"gemm_quant\",\"type\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,"
                      "\"rowwise_weight_gbps\":%.3f,\"rowwise_gflops\":%.2f,\"default_weight_gbps\":%.3f",
                      std::string(dtype_name(t)).c_str(), (long long)M, (long long)N, (long long)K, gb / tr,
                      gf / tr, gb / t_default);
          if (ti > 0) std::printf(",\"int8_weight_gbps\":%.3f,\"int8_gflops\":%.2f", gb / ti, gf / ti);
          if (tp > 0)
            std::printf(",\"packed_weight_gbps\":%.3f,\"packed_gflops\":%.2f,\"packed_vs_int8\":%.3f", gb / tp, gf / tp,
                        ti2 / tp);
          std::printf("}\n");
        } else {
          std::printf("%-5s %5lld %6lld %5lld %6.1f|%7.1f", std::string(dtype_name(t)).c_str(), (long long)M,
                      (long long)N, (long long)K, gb / tr, gf / tr);
          if (ti > 0) std::printf(" %6.1f|%7.1f %6.2fx", gb / ti, gf / ti, tr / ti);
          else std::printf(" %14s %7s", "-", "");
          if (tp > 0) std::printf(" %6.1f|%7.1f %6.2fx\n", gb / tp, gf / tp, ti2 / tp);
          else std::printf("\n");
        }
        std::fflush(stdout);
      }
}

void run_gemm_bench(const GemmBenchOptions& opt) {
  apply_rank_threads(plan_rank_threads(0, 1, opt.threads));
  MatmulEngine eng;
  const int threads = current_num_threads();
  if (!opt.json) {
    std::printf("gemm: out (M,N) = in (M,K) x W^T, W (N,K); %d thread(s); medians of 7 interleaved samples\n",
                threads);
    std::printf("ours = tensorpar matmul_forward; onednn = raw oneDNN primitive, same layouts "
                "(bf16 for quantized weights); peak = large square oneDNN matmul\n\n");
  }
  // The machine peak first: a large square matmul in f32 and bf16, and the FMA-loop limit.
  const int64_t S = opt.quick ? 512 : 2048;
  double peak[2] = {0, 0};
  std::vector<Row> peak_rows;
  std::vector<DType> peak_types = {DType::kF32, DType::kBF16};
  if (!onednn_has_bf16_matmul()) {  // no bf16 peer on this CPU: bf16 rows compare with f32's peak
    peak_types.pop_back();
    if (!opt.json) std::printf("(oneDNN has no bf16 matmul on this CPU: its rows multiply f32 operands)\n");
  }
  for (const DType t : peak_types) {
    Row r = bench_shape(eng, t, S, S, S, 7);
    r.peak = r.onednn;
    r.fma_peak = fma_peak_gflops(t == DType::kBF16);
    peak[t == DType::kBF16] = r.onednn;
    peak_rows.push_back(r);
  }
  if (peak_rows.size() == 1) peak[1] = peak[0];
  if (!opt.json) {
    std::printf("%-5s %5s %5s %5s %10s %10s %7s %9s %7s\n", "dtype", "M", "N", "K", "ours", "onednn",
                "ratio", "peak", "/peak");
  }
  for (const Row& r : peak_rows) print_row(r, opt.json);

  // TP shard shapes: a 576/1536 model (SmolLM-135M: C=576, F=1536) and a 4096-wide one, whole
  // and at TP=2 (halves) and TP=3 (thirds).
  std::vector<NK> shapes = {{1536, 576}, {576, 1536}, {768, 576}, {2048, 4096}, {4096, 2048}, {1365, 4096}};
  std::vector<int64_t> ms = opt.rows.empty() ? std::vector<int64_t>{1, 16, 512} : opt.rows;
  if (opt.quick) shapes = {{1536, 576}, {576, 1536}}, ms = {1, 16};
  const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_1};
  uint64_t seed = 100;
  for (const int64_t m : ms) {
    for (const NK s : shapes) {
      for (const DType t : dtypes) {
        Row r = bench_shape(eng, t, m, s.n, s.k, ++seed);
        r.peak = peak[t != DType::kF32];
        print_row(r, opt.json);
      }
    }
  }
  if (!opt.json) {
    std::printf("\nFMA-instruction peak (all threads): f32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n",
                peak_rows[0].fma_peak, peak_rows.back().fma_peak * (peak_rows.size() > 1));
  }
}

}  // namespace

void add_gemm_bench(CLI::App& bench) {
  auto opt = std::make_shared<GemmBenchOptions>();
  CLI::App* cmd = bench.add_subcommand("gemm", "Matmul GFLOP/s: ours beside raw oneDNN and the peak");
  cmd->add_flag("--json", opt->json, "One JSON object per line");
  cmd->add_flag("--quick", opt->quick, "A few small shapes only (a smoke run)");
  cmd->add_flag("--inference", opt->inference,
                "The batch-invariant inference kernels for float weights instead: row-wise, panels (AVX2), AVX512-BF16, AMX");
  cmd->add_option("--threads", opt->threads, "Compute threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_flag("--quant", opt->quant,
                "The batch-invariant inference kernels for GGUF block-quantized weights instead: row-wise "
                "(f32 activations) and int8 (VNNI or AVX2)");
  cmd->add_option("--rows", opt->rows,
                  "The row counts M to run (default 1,16,512; with --quant 1,4,16,64,256; with --inference 1,4,16,64,256,840)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--types", opt->types,
                  "With --quant: the weight types (comma-separated GGUF names; default q4_0,q4_1,q5_0,q8_0,q4_k,q6_k); "
                  "with --inference: f32, bf16 or f16 (default bf16)")
      ->delimiter(',');
  cmd->callback([opt] {
    opt->quant ? run_quant_bench(*opt) : opt->inference ? run_inference_bench(*opt) : run_gemm_bench(*opt);
  });
}

}  // namespace tensorpar
