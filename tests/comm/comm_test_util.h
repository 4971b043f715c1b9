// Helpers for the Communicator tests: random per-rank inputs of any comm dtype as raw bytes, an
// independent naive reduction (left to right in f32 for 16-bit types: the order the backends
// promise), NaN/0xFF poisoning, and a runner over the threads backend.
#pragma once

#include <cstddef>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/launch.h"
#include "core/half.h"
#include "test_util.h"

namespace tensorpar::testing {

using Bytes = std::vector<std::byte>;

inline int64_t comm_elem_bytes(DType t) { return dtype_block_bytes(t); }

// Fresh random values: floats in [-1, 1) (rounded to the dtype), integers in [-1000, 1000).
inline Bytes random_bytes(Rng& rng, DType t, int64_t count) {
  Bytes b(static_cast<size_t>(count * comm_elem_bytes(t)));
  for (int64_t i = 0; i < count; ++i) {
    std::byte* p = b.data() + i * comm_elem_bytes(t);
    switch (t) {
      case DType::kF32: { const float v = rng.uniform(); std::memcpy(p, &v, 4); break; }
      case DType::kBF16: { const bf16 v = f32_to_bf16(rng.uniform()); std::memcpy(p, &v, 2); break; }
      case DType::kF16: { const f16 v = f32_to_f16(rng.uniform()); std::memcpy(p, &v, 2); break; }
      case DType::kI32: { const int32_t v = int32_t(rng.integer(-1000, 1000)); std::memcpy(p, &v, 4); break; }
      case DType::kI64: { const int64_t v = rng.integer(-1000, 1000); std::memcpy(p, &v, 8); break; }
      default: ADD_FAILURE() << "unsupported dtype"; break;
    }
  }
  return b;
}

inline Bytes poisoned(size_t nbytes) { return Bytes(nbytes, std::byte{0xff}); }  // NaN for floats

// out[i] = x_0[i] op x_1[i] op ... for elements [offset, offset + count) of each input.
inline Bytes reference_reduce(DType t, ReduceOp op, const std::vector<const Bytes*>& xs, int64_t offset,
                              int64_t count) {
  const int64_t eb = comm_elem_bytes(t);
  Bytes out(static_cast<size_t>(count * eb));
  auto apply = [op](auto a, auto b) {
    if (op == ReduceOp::kSum) return decltype(a)(a + b);
    if (op == ReduceOp::kMax) return b > a ? b : a;
    return b < a ? b : a;
  };
  for (int64_t i = 0; i < count; ++i) {
    auto src = [&](size_t k) { return xs[k]->data() + (offset + i) * eb; };
    std::byte* dst = out.data() + i * eb;
    if (t == DType::kI32 || t == DType::kI64) {
      int64_t acc = 0;
      for (size_t k = 0; k < xs.size(); ++k) {
        int64_t v = 0;
        if (t == DType::kI32) { int32_t w; std::memcpy(&w, src(k), 4); v = w; } else { std::memcpy(&v, src(k), 8); }
        acc = k == 0 ? v : apply(acc, v);
      }
      if (t == DType::kI32) { const int32_t w = int32_t(acc); std::memcpy(dst, &w, 4); } else { std::memcpy(dst, &acc, 8); }
      continue;
    }
    float acc = 0;
    for (size_t k = 0; k < xs.size(); ++k) {
      float v;
      if (t == DType::kF32) { std::memcpy(&v, src(k), 4); }
      else if (t == DType::kBF16) { bf16 h; std::memcpy(&h, src(k), 2); v = bf16_to_f32(h); }
      else { f16 h; std::memcpy(&h, src(k), 2); v = f16_to_f32(h); }
      acc = k == 0 ? v : apply(acc, v);
    }
    if (t == DType::kF32) std::memcpy(dst, &acc, 4);
    else if (t == DType::kBF16) { const bf16 h = f32_to_bf16(acc); std::memcpy(dst, &h, 2); }
    else { const f16 h = f32_to_f16(acc); std::memcpy(dst, &h, 2); }
  }
  return out;
}

// By default the configured timeout (TENSORPAR_COMM_TIMEOUT; scripts/test.sh sets 60 s): a bug
// fails a test instead of hanging it, and a busy machine does not make a correct run time out.
// Tests of the timeout itself pass a short one. Debug mode stays off unless a test turns it on.
inline CommOptions test_comm_options(double timeout_s = CommOptions::from_env().timeout_s) {
  CommOptions o;
  o.timeout_s = timeout_s;
  return o;
}

inline void run_threads(int n, const std::function<void(Communicator&)>& fn,
                        const CommOptions& options = test_comm_options()) {
  LaunchConfig cfg;
  cfg.backend = Backend::kThreads;
  cfg.n_ranks = n;
  cfg.threads_per_rank = 1;
  cfg.comm = options;
  launch_ranks(cfg, fn);
}

// Smaller problems under the sanitizers (they slow memory-bound code ~10x).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr int64_t kBigCount = 1 << 17;
#else
inline constexpr int64_t kBigCount = 1 << 20;
#endif

// What a run with an injected fault left: launch_ranks' error and each rank's own error ("" for
// a rank that ended without one).
struct FaultRun {
  std::string launch_error;
  std::vector<std::string> rank_errors;
};

// body on n ranks of the threads backend with the fault spec `fault` (comm/fault_injection.h)
// installed; each rank's exception is recorded, then passed on to launch_ranks.
inline FaultRun run_ranks_with_fault(int n, const std::string& fault, const CommOptions& options,
                                     const std::function<void(Communicator&)>& body) {
  FaultRun out;
  out.rank_errors.resize(size_t(n));
  std::mutex mu;
  LaunchConfig cfg;
  cfg.n_ranks = n;
  cfg.threads_per_rank = 1;
  cfg.comm = options;
  cfg.fault = fault;
  try {
    launch_ranks(cfg, [&](Communicator& world) {
      try {
        body(world);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        out.rank_errors[size_t(world.rank())] = e.what();
        throw;
      }
    });
  } catch (const Error& e) {
    out.launch_error = e.what();
  }
  return out;
}

}  // namespace tensorpar::testing
