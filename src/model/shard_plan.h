// The shard plan of a checkpoint at a TP size without loading it: which dim of each tensor is
// split, each rank's range and the stored bytes each rank reads (for `tensorpar inspect` and
// memory estimates). Mirrors the Transformer's layout (attention by KV groups, ffn, vocab).
#pragma once

#include <string>
#include <vector>

#include "io/tensor_store.h"
#include "model/model_config.h"
#include "parallel/partition.h"

namespace tensorpar {

struct TensorShardPlan {
  TensorInfo info;
  std::string split;                  // "replicated", "rows" or "cols" of the stored [out, in] matrix
  std::vector<Range> ranges;          // per rank, along the split dim (whole for replicated)
  std::vector<int64_t> bytes;         // stored bytes each rank reads
};

// Where the ffn split may cut (mlp_ffn_ranges' align): the largest quant block among the
// tensors whose input dim is the ffn (down_proj), at least 32, so a rank's columns hold whole
// blocks (256 for K-quants) and stay quantized.
int64_t ffn_alignment(const ModelConfig& config, const std::vector<TensorInfo>& tensors);

// ep: expert parallelism inside the TP group (MoE models, see ExpertParallel): an expert's
// tensors are read only by the ranks of the EP rank that owns it, split over its expert-TP ranks.
std::vector<TensorShardPlan> shard_plan(const ModelConfig& config, const std::vector<TensorInfo>& tensors, int tp,
                                        int ep = 1);

}  // namespace tensorpar
