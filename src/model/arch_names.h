// Tensor names of the Llama-like families (Llama, Qwen2, Mistral, Gemma 3) in HF checkpoints and in
// llama.cpp's GGUF files: the model-level tensors and a layer's tensor by its HF and GGUF suffix.
#pragma once

#include <cstdint>
#include <string>

namespace tensorpar {

class TransformerLayer;
class WeightSource;
struct ModelConfig;

struct ArchNames {
  bool gguf = false;
  std::string embed() const { return gguf ? "token_embd.weight" : "model.embed_tokens.weight"; }
  std::string head() const { return gguf ? "output.weight" : "lm_head.weight"; }
  std::string norm() const { return gguf ? "output_norm.weight" : "model.norm.weight"; }
  std::string layer(int64_t l, const char* hf, const char* gg) const {
    return gguf ? "blk." + std::to_string(l) + "." + gg : "model.layers." + std::to_string(l) + "." + hf;
  }
};

// Loads layer l's projections, named alike in every Llama-like family: q/k/v (+ biases when the
// config has them) into the fused qkv, o, gate/up into the fused MLP input, down (arch_llama.cpp).
void load_llama_like_projections(TransformerLayer& L, const WeightSource& src, const ArchNames& n, int64_t l,
                                 const ModelConfig& c);

}  // namespace tensorpar
