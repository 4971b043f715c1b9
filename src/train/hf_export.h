// Model configs as HF config.json objects (and as a checkpoint's state stores them), and `export`:
// a sharded training checkpoint assembled into a plain HF directory (config.json + model.safetensors,
// full tensors, HF names and layouts: GPT-2's q/k/v fused back into c_attn and its Conv1D weights
// transposed back to [in, out]; a GGUF llama run's q/k rows put back into HF's half-split order).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/tensor.h"
#include "model/model_config.h"

namespace tensorpar {

// A config.json object that ModelConfig::from_hf_json reads back to `c` (llama family: a
// LlamaForCausalLM/Qwen2 config; GPT-2: GPT2LMHeadModel). Throws Error for an interleaved-RoPE
// config (from a GGUF llama file), which has no HF form with its weights as they are.
nlohmann::json hf_config_json(const ModelConfig& c);

// A checkpoint's model config, in its state. Half-split RoPE (HF directories, GPT-2, Qwen2 GGUF):
// under "config", hf_config_json(c), which `train --resume` without --model reads. A GGUF llama
// model (interleaved RoPE, Q/K rows in llama.cpp's order): under "config_interleaved_rope", the
// hf_config_json of the same model with half-split RoPE plus "tensorpar_rope_layout":
// "interleaved", so that a reader unaware of the layout finds no "config" rather than a wrong one.
void store_model_config(nlohmann::json& state, const ModelConfig& c);
// The config store_model_config wrote (rope layout included); `where` names the checkpoint in the
// Error thrown when the state holds neither key.
ModelConfig stored_model_config(const nlohmann::json& state, const std::string& where);

// llama.cpp's converter (convert_hf_to_gguf, llama arch) reorders the rows of q_proj and k_proj
// (weights and biases) within each head of HS rows: GGUF row 2i + j holds HF row j*HS/2 + i
// (i < HS/2, j in {0, 1}). Returns t ((heads*HS) or (heads*HS, in)) with its rows in HF order.
Tensor gguf_qk_rows_to_hf(const Tensor& t, int64_t head_dim);

// Reads the checkpoint (a step directory or a root with `latest`) and writes out_dir/config.json
// and out_dir/model.safetensors in `dtype` (f32: the master weights as they are; bf16 or f16:
// each value rounded once; config.json's torch_dtype says which). A GGUF llama run is written as
// a plain HF llama directory (q/k rows through gguf_qk_rows_to_hf, half-split RoPE). Returns the
// number of tensors written.
int64_t export_hf(const std::string& checkpoint, const std::string& out_dir, DType dtype = DType::kF32);

// The run's tokenizer into out_dir, so the export is self-contained: an HF model directory's
// tokenizer.json / tokenizer_config.json / special_tokens_map.json copied, a tokenizer.json file
// copied, a GGUF's vocabulary written as tokenizer.json + tokenizer_config.json (its chat template
// included). Returns what was done, for the user ("" when `source` is empty).
std::string export_tokenizer(const std::string& source, const std::string& out_dir);

}  // namespace tensorpar
