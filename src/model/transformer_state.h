// Transformer's private buffers: the inference workspace (grows, never shrinks, so decode
// allocates nothing per token) and the activations one training step saves for its backward.
#pragma once

#include <algorithm>
#include <vector>

#include "model/transformer.h"

namespace tensorpar {

struct Transformer::Workspace {
  Tensor x, h, a;  // (cap, C): residual stream, normed input, block output
  Tensor q, k, v, att;  // attention scratch: (cap, NH_local*HS), (cap, NKV_local*HS) x2, (cap, NH_local*HS)
  MlpActs mlp;
  std::vector<int64_t> ids, positions;
  std::vector<PagedSeq> seqs;      // the batch's sequences (rows, positions, block tables)
  std::vector<int64_t> logit_rows; // rows whose logits are wanted
  int64_t cap = 0;

  void reserve(int64_t T, int64_t C, int64_t q_cols, int64_t kv_cols) {
    if (T <= cap) return;
    cap = T;
    x = Tensor::empty({T, C}, DType::kF32);
    h = Tensor::empty({T, C}, DType::kF32);
    a = Tensor::empty({T, C}, DType::kF32);
    q = Tensor::empty({std::max<int64_t>(1, T * q_cols)}, DType::kF32);
    att = Tensor::empty({std::max<int64_t>(1, T * q_cols)}, DType::kF32);
    k = Tensor::empty({std::max<int64_t>(1, T * kv_cols)}, DType::kF32);
    v = Tensor::empty({std::max<int64_t>(1, T * kv_cols)}, DType::kF32);
    ids.resize(size_t(T));
    positions.resize(size_t(T));
  }
};

// What one block saves for its backward; a recomputed block keeps only x_in between its
// forward and backward (the rest is rebuilt in TrainState::recomputed).
struct TrainLayerActs {
  Tensor x_in, h1, mean1, rstd1, x_mid, h2, mean2, rstd2;  // (N, C) and (N)
  AttentionActs attn;
  MlpActs mlp;
};

struct Transformer::TrainState {
  std::vector<TrainLayerActs> layers;
  TrainLayerActs recomputed;  // the activations of the recomputed block being run backward
  Tensor x_out, hf, meanf, rstdf, logits, lse;  // (N, C), (N), (N, V_local), (N)
  Tensor d_logits, d_h, d_x;                    // backward scratch: (N, V_local), (N, C), (N, C)
  std::vector<int64_t> positions;
  void invalidate() { *this = TrainState{}; }
};

}  // namespace tensorpar
