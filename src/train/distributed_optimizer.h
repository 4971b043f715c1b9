// The distributed optimizer (ZeRO stage 1, Megatron's --use-distributed-optimizer): the AdamW
// moments are sharded over the data-parallel group instead of replicated. Every trainable
// parameter of this rank (its TP/PP shard) is laid end to end in one flat f32 space, in the order
// backward completes their gradients (ParamShard::grad_part; held ones last), cut into buckets
// of `bucket` x dp elements, each split into dp equal pieces (the last bucket smaller, padded to
// a multiple of dp); DP rank r owns piece r of every bucket, chunk() elements in all. A step:
//   1. reduce_scatter of each bucket over DP: each rank gets the sum of its pieces only (written
//      back into its parameters' gradients there; the rest of them stay local). A bucket can be
//      reduced as soon as backward has finished its gradients (reduce_bucket, on a communication
//      thread: gradient_buckets.h), or all after backward (reduce_gradients);
//   2. the global gradient norm from each rank's pieces (sums of squares gathered over DP in rank
//      order, then over TP and PP as global_grad_norm does) and clipping of the pieces;
//   3. AdamW on the pieces (moments exist for them only: 1/dp of the replicated state);
//   4. all_gather of each bucket's updated pieces: every rank holds the whole parameters again.
// The collectives go through staging buffers of one bucket, so the only memory beyond the
// model's own is the pieces' two moments. Checkpoints are unchanged: before a save the moments
// are gathered into whole per-parameter tensors (AdamW's state) and dropped again after; a load
// keeps only this rank's pieces. So a run saved with it resumes without it, at any shape, and the
// other way round.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/causal_lm.h"
#include "train/optimizer.h"

namespace tensorpar {

class DistributedAdamW {
 public:
  static constexpr int64_t kBucket = int64_t(1) << 18;  // elements per rank per collective (1 MiB)

  // `params`: this rank's trainable shards, the same names and shapes on every DP rank (expert
  // shards are refused: their gradients sum over another group). Collective over dp.
  // `bucket`: elements per rank per collective (tests use a few to cross bucket edges).
  // `held`: names of parameters whose gradients the caller completes only after backward
  // (placed last, their buckets' parts kHeldGrads).
  DistributedAdamW(const std::vector<ParamShard>& params, Communicator& dp, int64_t bucket = kBucket,
                   const std::vector<std::string>& held = {});

  // Step 1: this rank's pieces' summed gradients, in place in the parameters' gradients.
  // Collective over dp.
  void reduce_gradients(const std::vector<ParamShard>& params);
  // Step 1 for bucket j alone, over `dp` (the group's ranks in the same order: the group or a
  // split of it), through the caller's staging buffers of staging_floats() each. Reads and
  // writes the bucket's gradients only.
  void reduce_bucket(const std::vector<ParamShard>& params, int64_t j, Communicator& dp, float* send,
                     float* recv) const;
  int64_t buckets() const { return (chunk_ + bucket_ - 1) / bucket_; }
  int64_t staging_floats() const { return bucket_ * dp_.size(); }
  // The parts (ParamShard::grad_part, kHeldGrads for held parameters) whose gradients bucket j
  // reads: it can be reduced once backward has finished all of them.
  std::vector<int64_t> bucket_parts(const std::vector<ParamShard>& params, int64_t j) const;
  // Step 2: the global norm before clipping; scales the chunk when above max_norm (> 0).
  // Collective over dp, tp and pp.
  double clip(const std::vector<ParamShard>& params, Communicator& tp, double max_norm, Communicator* pp);
  // Steps 3 and 4 at learning rate lr; opt counts the step and holds the hyperparameters.
  void step(const std::vector<ParamShard>& params, AdamW& opt, float lr);

  // Gathers the moments into opt's whole per-parameter state (before a save). Collective over dp.
  void export_state(const std::vector<ParamShard>& params, AdamW& opt);
  // Keeps this rank's chunk of opt's per-parameter state (after a load) and clears it from opt.
  void import_state(const std::vector<ParamShard>& params, AdamW& opt);

  int64_t chunk() const { return chunk_; }
  int64_t total() const { return total_; }
  // Bytes of optimizer state this rank holds (the two moments of its chunk).
  int64_t state_bytes() const { return 2 * chunk_ * int64_t(sizeof(float)); }

 private:
  struct Slot {
    int64_t offset = 0, numel = 0;  // in the flat space
    int copies = 1;                 // ParamShard::copies: weight 1/copies in the norm
    int64_t part = kEndGrads;       // grad_part, or kHeldGrads
  };
  // Bucket j's first owned index, its elements per rank, and where it starts in the flat space.
  int64_t bucket_begin(int64_t j) const { return j * bucket_; }
  int64_t bucket_size(int64_t j) const { return std::min(bucket_, chunk_ - j * bucket_); }
  int64_t bucket_flat(int64_t j) const { return j * bucket_ * dp_.size(); }
  // Calls fn(param index, first element in the param, offset from lo, count) for every
  // parameter piece inside the flat range [lo, hi).
  template <typename F>
  void for_range(const std::vector<ParamShard>& params, int64_t lo, int64_t hi, F&& fn) const;
  // The same over this rank's pieces (offsets: indices into its chunk() owned elements).
  template <typename F>
  void for_chunk(const std::vector<ParamShard>& params, F&& fn) const;
  // Copies flat [lo, lo + n) of the gradients (gradient = true) or values into dst (zeros past
  // the end), or back from src.
  void gather_flat(const std::vector<ParamShard>& params, bool gradient, int64_t lo, int64_t n, float* dst) const;
  void scatter_flat(const std::vector<ParamShard>& params, bool gradient, int64_t lo, int64_t n, const float* src) const;

  Communicator& dp_;
  std::vector<Slot> slots_;
  int64_t total_ = 0, chunk_ = 0;  // elements in the flat space; owned by each rank
  int64_t bucket_ = kBucket;
  std::vector<float> send_, recv_;              // staging: one bucket per rank
  std::vector<float> m_, v_;                    // this rank's pieces of the moments
};

}  // namespace tensorpar
