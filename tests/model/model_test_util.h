// Helpers for the model tests: fixture readers (token files, raw f32 logits, the HF tensors of
// grads/params safetensors in our layout), running a model on n thread ranks, assembling
// rank shards into full tensors, per-tensor error norms.
#pragma once

#include <cstdint>
#include <fstream>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "comm/launch.h"
#include "core/tensor.h"
#include "fixtures_dir.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/load_model.h"
#include "test_util.h"

namespace tensorpar::testing {

inline std::string model_fixture(const std::string& name) { return test::fixtures_dir() + "/models/" + name; }

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
  cfg.comm = CommOptions::from_env();  // TENSORPAR_COMM_TIMEOUT (scripts/test.sh: 60 s)
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

// Token rows (read_id_lines) as a (B,T) i64 tensor.
inline Tensor ids_tensor(const std::vector<std::vector<int64_t>>& rows) {
  const int64_t B = int64_t(rows.size()), T = int64_t(rows[0].size());
  Tensor t = Tensor::empty({B, T}, DType::kI64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i) t.data<int64_t>()[b * T + i] = rows[size_t(b)][size_t(i)];
  return t;
}

// The fixture (HF) tensor that holds our parameter `name`: GPT-2's c_attn.{q,k,v}.{weight,bias}
// are parts of c_attn.{weight,bias}; every other name is the same.
inline std::string fixture_name(const std::string& name) {
  const auto part = name.find(".c_attn.");
  if (part == std::string::npos) return name;
  return name.substr(0, part) + ".c_attn." + name.substr(part + 10);
}

// The fixture tensor for our parameter `name` of global `shape`, in our layout (GPT-2 Conv1D
// [in, out] transposed to [out, in], c_attn split q/k/v).
inline std::vector<float> fixture_tensor(const SafetensorsFile& ref, const std::string& name,
                                         const Shape& shape) {
  auto transposed = [](const std::vector<float>& m, int64_t rows, int64_t cols, int64_t col0,
                       int64_t ncols) {
    std::vector<float> out(size_t(ncols * rows));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < ncols; ++c)
        out[size_t(c * rows + r)] = m[size_t(r * cols + col0 + c)];
    return out;
  };
  const auto part = name.find(".c_attn.");
  if (part != std::string::npos) {
    const int64_t which = int64_t(std::string("qkv").find(name[part + 8]));
    const auto m = ref.read(fixture_name(name)).to_vector();
    const int64_t C = shape[0];
    if (shape.size() == 1)
      return std::vector<float>(m.begin() + which * C, m.begin() + (which + 1) * C);
    return transposed(m, C, 3 * C, which * C, C);
  }
  const auto m = ref.read(name).to_vector();
  const bool conv1d = name.find("transformer.h.") == 0 && shape.size() == 2;
  if (!conv1d) return m;
  return transposed(m, shape[1], shape[0], 0, shape[0]);
}

// Fails unless our parameters (name -> global shape) cover every tensor of the fixture `ref`
// exactly: each fixture tensor has as many elements as the parameters read from it together,
// and no parameter reads a tensor the fixture lacks. `what` names the comparison in messages.
inline void expect_covers_fixture(const SafetensorsFile& ref,
                                  const std::map<std::string, Shape>& shapes,
                                  const std::string& what) {
  std::map<std::string, int64_t> covered;
  for (const auto& [name, shape] : shapes) covered[fixture_name(name)] += shape_numel(shape);
  for (const TensorInfo& t : ref.tensors()) {
    EXPECT_EQ(covered[t.name], shape_numel(t.shape))
        << what << ": " << ref.path() << " tensor " << t.name << " not (fully) compared";
    covered.erase(t.name);
  }
  for (const auto& [name, n] : covered)
    ADD_FAILURE() << what << ": " << name << " missing from " << ref.path();
}

// Per-tensor ||a - b|| / ||b|| (||a - b|| when b is all zeros).
inline double norm_ratio(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), n += double(b[i]) * b[i];
  return n == 0 ? std::sqrt(d) : std::sqrt(d / n);
}

}  // namespace tensorpar::testing
