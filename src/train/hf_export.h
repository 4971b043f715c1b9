// Model configs as HF config.json objects, and `export`: a sharded training checkpoint assembled
// into a plain HF directory (config.json + model.safetensors, full tensors, HF names and layouts:
// GPT-2's q/k/v fused back into c_attn and its Conv1D weights transposed back to [in, out]).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/model_config.h"

namespace tensorpar {

// A config.json object that ModelConfig::from_hf_json reads back to `c` (llama family: a
// LlamaForCausalLM/Qwen2 config; GPT-2: GPT2LMHeadModel). Throws Error for an interleaved-RoPE
// config (from a GGUF llama file), which has no HF form.
nlohmann::json hf_config_json(const ModelConfig& c);

// Reads the checkpoint (a step directory or a root with `latest`) and writes out_dir/config.json
// and out_dir/model.safetensors (f32). Returns the number of tensors written.
int64_t export_hf(const std::string& checkpoint, const std::string& out_dir);

}  // namespace tensorpar
