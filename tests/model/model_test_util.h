// Helpers for the model tests: fixture readers (token files, raw f32 logits) and running a
// model on n thread ranks while the main thread assembles the vocab-sharded logits.
#pragma once

#include <cstdint>
#include <fstream>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "comm/launch.h"
#include "core/tensor.h"
#include "model/causal_lm.h"
#include "model/load_model.h"
#include "test_util.h"

namespace tensorpar::testing {

inline std::string model_fixture(const std::string& name) { return std::string(TP_FIXTURES_DIR) + "/models/" + name; }

inline std::vector<std::vector<int64_t>> read_id_lines(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::vector<std::vector<int64_t>> out;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream is(line);
    std::vector<int64_t> row;
    int64_t v;
    while (is >> v) row.push_back(v);
    if (!row.empty()) out.push_back(row);
  }
  return out;
}

// Whitespace-separated numbers of a text file (token ids).
template <typename T>
inline std::vector<T> read_numbers(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return {std::istream_iterator<T>(f), std::istream_iterator<T>()};
}

inline std::vector<float> read_f32_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

inline void run_model_ranks(int n, const std::function<void(Communicator&)>& fn) {
  LaunchConfig cfg;
  cfg.backend = Backend::kThreads;
  cfg.n_ranks = n;
  cfg.threads_per_rank = 1;
  cfg.comm.timeout_s = 60;
  launch_ranks(cfg, fn);
}

// Writes this rank's logits (rows, V_local) into full (rows, V) at its vocab columns.
inline void scatter_logits(std::vector<float>& full, const Tensor& local, Range vr, int64_t V) {
  const int64_t rows = local.dim(0);
  const float* p = local.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < vr.size(); ++j) full[size_t(r * V + vr.begin + j)] = p[r * vr.size() + j];
}

// Global argmax of the last row of sharded logits (lowest index on ties), identical on every rank.
inline int64_t sharded_argmax(const Tensor& local, Range vr, Communicator& tp) {
  const int64_t rows = local.dim(0), Vl = vr.size();
  float best[2] = {-INFINITY, -1};
  const float* p = local.data<float>() + (rows - 1) * Vl;
  for (int64_t j = 0; j < Vl; ++j)
    if (p[j] > best[0]) best[0] = p[j], best[1] = float(vr.begin + j);
  std::vector<float> all(size_t(2 * tp.size()));
  tp.all_gather(best, all.data(), 2, DType::kF32);
  int64_t id = -1;
  float v = -INFINITY;
  for (int r = 0; r < tp.size(); ++r)
    if (all[size_t(2 * r)] > v) v = all[size_t(2 * r)], id = int64_t(all[size_t(2 * r + 1)]);
  return id;
}

using Gathered = std::map<std::string, std::vector<float>>;

// Writes this rank's shard t of p into full[p.name] (global row-major, at most 2-D).
inline void gather_into(Gathered& full, std::mutex& mu, const ParamShard& p, const Tensor& t) {
  const std::vector<float> v = t.to_vector();
  std::lock_guard<std::mutex> lock(mu);
  auto& dst = full[p.name];
  if (dst.empty()) dst.assign(size_t(shape_numel(p.global_shape)), NAN);
  if (p.shard_dim < 0) {
    dst = v;
    return;
  }
  const int64_t rows = p.global_shape[0], cols = p.global_shape.size() > 1 ? p.global_shape[1] : 1;
  if (p.shard_dim == 0) {
    std::copy(v.begin(), v.end(), dst.begin() + p.range.begin * cols);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < p.range.size(); ++j)
        dst[size_t(r * cols + p.range.begin + j)] = v[size_t(r * p.range.size() + j)];
  }
}

}  // namespace tensorpar::testing
