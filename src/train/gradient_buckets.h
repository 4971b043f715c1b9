// Data-parallel gradient reduction overlapped with backward (train --dp-bucket-mb). The
// gradients are grouped into buckets in the order backward completes them (ParamShard::
// grad_part: the final norm and LM head, then the layers from the last, then the embedding);
// once the step's last micro-batch has finished every gradient of a bucket (the model's backward
// hook says so), the bucket is reduced on a communication thread (comm/comm_thread.h) while
// backward goes on, and finish() waits for the rest. Two kinds of reduction:
//   - the replicated optimizer's: buckets of about bucket_bytes, each packed into one staging
//     buffer, all-reduced and unpacked in place. Every element is summed over the same ranks as
//     by one all-reduce per tensor after backward; only the backend's summation order may differ
//     (not at all for two ranks);
//   - the distributed optimizer's (ZeRO-1): its own buckets (distributed_optimizer.h), each
//     reduce-scattered into this rank's pieces.
// A bucket holding kHeldGrads parameters waits for finish().
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "comm/comm_thread.h"
#include "model/causal_lm.h"
#include "train/distributed_optimizer.h"

namespace tensorpar {

class GradientBuckets {
 public:
  // The replicated optimizer's: params are the shards it steps, the same list on every rank of
  // the group (frozen and empty ones are skipped); an expert's shard (ParamShard::expert) is
  // summed over edp instead of dp. bucket_bytes >= 1 (a gradient larger than it is a bucket of
  // its own). Collective over dp and edp (each gets a CommThread).
  GradientBuckets(const std::vector<ParamShard>& params, Communicator& dp, Communicator* edp, int64_t bucket_bytes);
  // The distributed optimizer's: dist's buckets of params over dp (its group). dist and params'
  // tensors outlive this. Collective over dp.
  GradientBuckets(const std::vector<ParamShard>& params, const DistributedAdamW& dist, Communicator& dp);

  // A step in which backward runs `backwards` times on this rank (its micro-batches): a bucket
  // is final when every part in it was reported that many times.
  void begin_step(int64_t backwards);
  // The model's backward hook (CausalLM::set_backward_hook).
  void gradients_done(int64_t part);
  // Launches the buckets not launched yet (all of them for a model that never calls the hook),
  // waits for every one and leaves the sums in the gradients. Rethrows a reduction's failure.
  void finish();

  int64_t buckets() const { return int64_t(buckets_.size()); }
  // Buckets of this step launched by the hook, before finish() was called: reduced while
  // backward went on.
  int64_t launched_during_backward() const { return launched_early_; }
  // Seconds the communication threads have spent in the buckets' collectives (packing not
  // counted), since construction: all of them, or the dp group's alone.
  double reduce_seconds() const;
  double dp_reduce_seconds() const { return reduce_s_[0].load(std::memory_order_relaxed); }

 private:
  struct Bucket {
    int group = 0;               // index into threads_
    std::vector<int64_t> parts;  // the parts whose backward completes it
    std::function<void(Communicator&)> reduce;  // on the group's communication thread
  };
  bool ready(const Bucket& b) const;
  void launch(const Bucket& b);

  std::vector<ParamShard> params_;                    // the shards the buckets read
  std::vector<std::unique_ptr<CommThread>> threads_;  // [0]: dp; [1]: edp when it has experts
  std::vector<std::vector<float>> staging_;           // per thread: what its largest bucket needs
  std::vector<Bucket> buckets_;                       // launch order (backward's)
  std::map<int64_t, int64_t> reported_;               // part -> hook calls this step
  int64_t backwards_ = 0;
  size_t next_ = 0;  // the first bucket not launched
  int64_t launched_early_ = 0;
  std::atomic<double> reduce_s_[2] = {0.0, 0.0};  // per group (dp, edp): added by their threads
};

}  // namespace tensorpar
