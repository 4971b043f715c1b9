// Helpers for the training tests: assembling rank shards into full tensors, the fixtures' HF
// tensors in our layout (GPT-2 Conv1D transposed, c_attn split q/k/v), per-tensor error norms.
#pragma once

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/model_test_util.h"

namespace tensorpar::testing {

// The fixture tensor for our parameter `name` of global `shape`, in our layout.
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
    const std::string base = name.substr(0, part) + ".c_attn." + name.substr(part + 10);
    const auto m = ref.read(base).to_vector();
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

inline double norm_ratio(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), n += double(b[i]) * b[i];
  return n == 0 ? std::sqrt(d) : std::sqrt(d / n);
}

inline Tensor ids_tensor(const std::vector<std::vector<int64_t>>& rows) {
  const int64_t B = int64_t(rows.size()), T = int64_t(rows[0].size());
  Tensor t = Tensor::empty({B, T}, DType::kI64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i) t.data<int64_t>()[b * T + i] = rows[size_t(b)][size_t(i)];
  return t;
}

// A small llama-family config for fast training tests.
inline ModelConfig tiny_llama(int64_t vocab = 256) {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = vocab;
  c.hidden = 48;
  c.n_layers = 2;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.ffn = 80;
  c.max_position = 64;
  c.norm_eps = 1e-5;
  return c;
}

}  // namespace tensorpar::testing
