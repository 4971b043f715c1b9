// Data-parallel gradient reduction overlapped with backward (train --dp-bucket-mb). The
// gradients are grouped into buckets of about bucket_bytes in the order backward completes them
// (ParamShard::grad_part: the final norm and LM head, then the layers from the last, then the
// embedding); once the step's last micro-batch has completed every gradient of a bucket (the
// model's backward hook says so), the bucket is all-reduced over its group on a communication
// thread (comm/comm_thread.h) while backward goes on: the thread packs the bucket's gradients
// into one staging buffer, all-reduces it and unpacks the sums in place. finish() waits for the
// rest. Every element is summed over the same ranks as by one all-reduce per tensor after
// backward; only the backend's summation order may differ (not at all for two ranks).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "comm/comm_thread.h"
#include "model/causal_lm.h"

namespace tensorpar {

class GradientBuckets {
 public:
  // params: the shards the optimizer steps, the same list on every rank of the group (frozen
  // and empty ones are skipped); an expert's shard (ParamShard::expert) is summed over edp
  // instead of dp. bucket_bytes >= 1 (a gradient larger than it is a bucket of its own).
  // Collective over dp and edp (each gets a CommThread).
  GradientBuckets(const std::vector<ParamShard>& params, Communicator& dp, Communicator* edp, int64_t bucket_bytes);

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
  // Seconds the communication threads have spent in the buckets' all-reduces (packing not
  // counted), since construction: all of them, or the dp group's alone.
  double reduce_seconds() const;
  double dp_reduce_seconds() const { return reduce_s_[0].load(std::memory_order_relaxed); }

 private:
  struct Bucket {
    int group = 0;                 // index into threads_
    std::vector<ParamShard> grads; // in packing order
    std::vector<int64_t> parts;    // the parts whose backward completes it
    int64_t elements = 0;
    bool launched = false;
  };
  bool ready(const Bucket& b) const;
  void launch(Bucket& b);

  std::vector<std::unique_ptr<CommThread>> threads_;  // [0]: dp; [1]: edp when it has experts
  std::vector<std::vector<float>> staging_;           // one per thread: its largest bucket
  std::vector<Bucket> buckets_;                       // launch order (backward's)
  std::map<int64_t, int64_t> reported_;               // part -> hook calls this step
  int64_t backwards_ = 0;
  size_t next_ = 0;  // the first bucket not launched
  int64_t launched_early_ = 0;
  std::atomic<double> reduce_s_[2] = {0.0, 0.0};  // per group (dp, edp): added by their threads
};

}  // namespace tensorpar
