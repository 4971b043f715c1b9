// Entry points that build a rank's model: from a checkpoint (HF directory or GGUF file, each
// rank reading only its slices) or freshly initialised for training (the same at every TP size).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "comm/communicator.h"
#include "model/causal_lm.h"
#include "model/model_config.h"
#include "model/weight_source.h"
#include "parallel/parallel_moe.h"

namespace tensorpar {

// The config of an HF directory (its config.json) or a GGUF file (its metadata).
ModelConfig read_model_config(const std::string& path);

// path: an HF directory (config.json + model.safetensors or a sharded index) or a .gguf file.
// Collective over tp only in that every rank must call it (the kv-group split). Throws Error
// naming the file and tensor on a missing tensor or a shape that does not match the config.
// experts: expert parallelism of an MoE model (see ExpertParallel).
std::unique_ptr<CausalLM> load_model(const std::string& path, Communicator& tp, const LoadOptions& opt = {},
                                     ExpertParallel experts = {});

// Pipeline stage `pp.rank()` of pp.size() for inference (layers split as split_layers does
// evenly, or by layer_counts), wrapped as a StagedModel: tp is its TP group, control every rank
// of the model. Each rank reads only its stage's tensors. micro_batch_rows: see StagedModel.
std::unique_ptr<CausalLM> load_pipeline_stage(const std::string& path, Communicator& tp, Communicator& pp,
                                              Communicator& control, const LoadOptions& opt = {},
                                              std::span<const int64_t> layer_counts = {},
                                              int64_t micro_batch_rows = 64);
// A model with fresh weights (Transformer::init_weights) for training from scratch.
std::unique_ptr<CausalLM> init_model(const ModelConfig& config, Communicator& tp, uint64_t seed,
                                     ExpertParallel experts = {});

}  // namespace tensorpar
