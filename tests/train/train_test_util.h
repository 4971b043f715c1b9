// Helpers for the training tests: a tiny llama config. (Assembling shards, the fixtures' HF
// tensors in our layout and per-tensor error norms are in model/model_test_util.h.)
#pragma once

#include "model/model_test_util.h"

namespace tensorpar::testing {

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
