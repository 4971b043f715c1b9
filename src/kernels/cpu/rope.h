// Rotary position embedding (RoPE) for q or k laid out (T, NH, HS), with per-token positions
// (a KV-cache offset is just larger positions). Two pair layouts: half split (HF/NeoX, Qwen2:
// pairs (i, i + rot/2)) and interleaved (GGML llama: pairs (2i, 2i+1)); partial rotary (only the
// first rotary_dim of each head rotate); llama3 and linear frequency scaling.
#pragma once

#include <cstdint>
#include <vector>

namespace tensorpar {

enum class RopeLayout { kHalfSplit, kInterleaved };
enum class RopeScalingType { kNone, kLinear, kLlama3 };

// HF config.json's rope_scaling. Linear divides positions by factor; llama3 divides the
// low-frequency bands by factor with a smooth ramp between low_freq_factor and high_freq_factor
// relative to original_max_position_embeddings.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192;
};

// Frequencies, computed once per model (per head size, theta and scaling).
struct RopeTable {
  int64_t head_size = 0;   // HS
  int64_t rotary_dim = 0;  // even, <= HS; dims [rotary_dim, HS) pass through unchanged
  RopeLayout layout = RopeLayout::kHalfSplit;
  double position_scale = 1.0;   // positions are multiplied by this (1/factor for linear)
  std::vector<double> inv_freq;  // (rotary_dim/2): theta^(-2i/rotary_dim), after scaling

  // rotary_dim = 0 means the whole head.
  static RopeTable make(int64_t head_size, double theta, RopeLayout layout,
                        const RopeScaling& scaling = {}, int64_t rotary_dim = 0);
};

// out (T,NH,HS) = rotate inp (T,NH,HS) by angle positions[t] * inv_freq[i]; positions (T).
// out may alias inp (in-place). A batch of sequences is T = B*T rows with B*T positions.
// in_stride: floats between consecutive tokens of inp (0: NH*HS), e.g. the q columns of a fused
// q/k/v projection.
void rope_forward(float* out, const float* inp, const int64_t* positions, const RopeTable& table,
                  int64_t T, int64_t NH, int64_t in_stride = 0);
// d_inp (T,NH,HS) += rotation of d_out (T,NH,HS) by -angle (the transpose). d_inp must not
// alias d_out. d_inp_stride: floats between tokens of d_inp (0: NH*HS).
void rope_backward(float* d_inp, const float* d_out, const int64_t* positions,
                   const RopeTable& table, int64_t T, int64_t NH, int64_t d_inp_stride = 0);

}  // namespace tensorpar
