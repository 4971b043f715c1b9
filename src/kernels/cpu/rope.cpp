// RoPE: the frequency table (with llama3/linear scaling) and the rotation, parallel over tokens.
// Angles are formed in double, so large positions (long contexts) keep their precision.
#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/parallel_if.h"

namespace tensorpar {
namespace {

// Below this many elements of work a loop runs on the calling thread: waking a team costs
// more than it saves (decode steps, small test sizes).
constexpr int64_t kMinParallelWork = int64_t(1) << 15;

}  // namespace

RopeTable RopeTable::make(int64_t head_size, double theta, RopeLayout layout,
                          const RopeScaling& scaling, int64_t rotary_dim) {
  if (rotary_dim == 0) rotary_dim = head_size;
  TP_CHECK(head_size > 0, "[RopeTable::make] head_size: got ", head_size, ", expected > 0");
  TP_CHECK(rotary_dim > 0 && rotary_dim <= head_size && rotary_dim % 2 == 0,
           "[RopeTable::make] rotary_dim: got ", rotary_dim, ", expected even and in [2, ",
           head_size, "]");
  TP_CHECK(theta > 1, "[RopeTable::make] theta: got ", theta, ", expected > 1");
  RopeTable t;
  t.head_size = head_size;
  t.rotary_dim = rotary_dim;
  t.layout = layout;
  const int64_t half = rotary_dim / 2;
  t.inv_freq.resize(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    t.inv_freq[static_cast<size_t>(i)] =
        std::pow(theta, -static_cast<double>(2 * i) / static_cast<double>(rotary_dim));
  if (scaling.type == RopeScalingType::kLinear) {
    TP_CHECK(scaling.factor > 0, "[RopeTable::make] linear factor: got ", scaling.factor,
             ", expected > 0");
    t.position_scale = 1.0 / scaling.factor;
  } else if (scaling.type == RopeScalingType::kLlama3) {
    const double factor = scaling.factor, lo = scaling.low_freq_factor,
                 hi = scaling.high_freq_factor, ctx = scaling.original_max_position_embeddings;
    TP_CHECK(factor > 0 && lo > 0 && hi > lo && ctx > 0,
             "[RopeTable::make] llama3 rope_scaling: got factor=", factor, " low_freq_factor=", lo,
             " high_freq_factor=", hi, " original_max_position_embeddings=", ctx,
             ", expected all > 0 and high_freq_factor > low_freq_factor");
    const double low_freq_wavelen = ctx / lo, high_freq_wavelen = ctx / hi;
    for (double& f : t.inv_freq) {
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen < high_freq_wavelen) continue;  // high frequency: unchanged
      if (wavelen > low_freq_wavelen) {           // low frequency: slowed by factor
        f /= factor;
        continue;
      }
      const double smooth = (ctx / wavelen - lo) / (hi - lo);  // medium: ramp between the two
      f = (1 - smooth) * f / factor + smooth * f;
    }
  }
  return t;
}

namespace {

// Rotates every head of T tokens by sign * angle; out may alias inp when !accumulate.
template <bool kAccumulate>
void rope_rotate(float* out, const float* inp, const int64_t* positions, const RopeTable& table,
                 int64_t T, int64_t NH, double sign, int64_t out_stride, int64_t in_stride,
                 const char* where) {
  const int64_t HS = table.head_size, rot = table.rotary_dim, half = rot / 2;
  if (out_stride == 0) out_stride = NH * HS;
  if (in_stride == 0) in_stride = NH * HS;
  TP_CHECK(out_stride >= NH * HS && in_stride >= NH * HS, "[", where, "] row strides ", out_stride, " and ",
           in_stride, " are below NH*HS = ", NH * HS);
  TP_CHECK(T >= 0 && NH > 0 && HS > 0 && static_cast<int64_t>(table.inv_freq.size()) == half, "[",
           where, "] sizes: got T=", T, " NH=", NH, " HS=", HS,
           ", expected T >= 0, NH > 0 and a table from RopeTable::make");
  // The cosines and sines are formed once per distinct position, not once per token: a training
  // batch repeats the same positions in every sequence (B x T tokens, T positions). The table's
  // rows are the positions [p_min, p_max] when that range is no longer than T, else one row per
  // token (positions scattered over a long range: a batched decode step). Every entry is the same
  // double-precision angle as before, so the rotation is bitwise the per-token one.
  int64_t p_min = T > 0 ? positions[0] : 0, p_max = p_min;
  for (int64_t t = 1; t < T; ++t) p_min = std::min(p_min, positions[t]), p_max = std::max(p_max, positions[t]);
  const bool by_position = p_max - p_min < T;
  const int64_t n_rows = by_position ? p_max - p_min + 1 : T;
  std::vector<float> cos_tab(static_cast<size_t>(n_rows * half)), sin_tab(cos_tab.size());
  parallel_if(T * NH * HS > kMinParallelWork, [&] {
#pragma omp for schedule(static)
    for (int64_t row = 0; row < n_rows; ++row) {
      const double pos = static_cast<double>(by_position ? p_min + row : positions[row]) * table.position_scale;
      for (int64_t i = 0; i < half; ++i) {
        const double a = sign * pos * table.inv_freq[static_cast<size_t>(i)];
        cos_tab[static_cast<size_t>(row * half + i)] = static_cast<float>(std::cos(a));
        sin_tab[static_cast<size_t>(row * half + i)] = static_cast<float>(std::sin(a));
      }
    }
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t row = by_position ? positions[t] - p_min : t;
      const float* cos_v = cos_tab.data() + row * half;
      const float* sin_v = sin_tab.data() + row * half;
      for (int64_t h = 0; h < NH; ++h) {
        const float* x = inp + t * in_stride + h * HS;  // (HS)
        float* o = out + t * out_stride + h * HS;       // (HS)
        // Index pair (a, b) of rotation i for each layout.
        const int64_t stride_i = table.layout == RopeLayout::kHalfSplit ? 1 : 2;
        const int64_t offset_b = table.layout == RopeLayout::kHalfSplit ? half : 1;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t ia = i * stride_i, ib = ia + offset_b;
          const float c = cos_v[i], s = sin_v[i];
          const float xa = x[ia], xb = x[ib];
          const float ya = xa * c - xb * s, yb = xa * s + xb * c;
          if constexpr (kAccumulate) {
            o[ia] += ya;
            o[ib] += yb;
          } else {
            o[ia] = ya;
            o[ib] = yb;
          }
        }
        for (int64_t d = rot; d < HS; ++d) {
          if constexpr (kAccumulate)
            o[d] += x[d];
          else
            o[d] = x[d];
        }
      }
    }
  });
}

}  // namespace

void rope_forward(float* out, const float* inp, const int64_t* positions, const RopeTable& table,
                  int64_t T, int64_t NH, int64_t in_stride) {
  rope_rotate<false>(out, inp, positions, table, T, NH, 1.0, 0, in_stride, "rope_forward");
}

void rope_backward(float* d_inp, const float* d_out, const int64_t* positions,
                   const RopeTable& table, int64_t T, int64_t NH, int64_t d_inp_stride) {
  rope_rotate<true>(d_inp, d_out, positions, table, T, NH, -1.0, d_inp_stride, 0, "rope_backward");
}

}  // namespace tensorpar
