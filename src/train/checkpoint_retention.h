// Checkpoint retention (`train --keep-last N --keep-every K`): after a save is published and
// `latest` names it, older step-<N> directories of the root that the policy does not keep are
// removed, so a long run that saves often does not fill the disk. Never removed: the checkpoint
// `latest` names, any step past it (a save that was published but whose `latest` update did not
// happen), and anything that is not a published step directory (.tmp-step-N: a save in flight).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tensorpar {

struct RetentionPolicy {
  int64_t keep_last = 0;   // keep the newest N checkpoints (0: keep every checkpoint)
  int64_t keep_every = 0;  // and every one whose step is a multiple of K (0: none); needs keep_last
  bool prunes() const { return keep_last > 0; }
};

// Throws Error naming the flag when the policy is inconsistent (--keep-every without --keep-last,
// negative values).
void check_retention(const RetentionPolicy& policy);

// The steps of root's published checkpoint directories (step-<N> holding index.json), ascending.
std::vector<int64_t> checkpoint_steps(const std::string& root);

// The step `root/latest` names (-1 when there is no readable `latest` naming step-<N>).
int64_t latest_step_name(const std::string& root);

// Which of `steps` the policy removes when `latest` is the newest good checkpoint: every step at
// or before latest that is neither among the keep_last newest (latest counted) nor a multiple of
// keep_every. Pure: the rule itself, tested on its own.
std::vector<int64_t> steps_to_remove(const std::vector<int64_t>& steps, int64_t latest,
                                     const RetentionPolicy& policy);

// Applies the policy to root: each removed directory is first renamed to .del-step-N (so a crash
// mid-removal never leaves a half-deleted step-N that looks like a checkpoint), then deleted;
// leftovers of such a crash are deleted too. Does nothing without a `latest`. Returns the
// step-<N> paths removed. Throws Error naming the directory when one cannot be removed.
std::vector<std::string> prune_checkpoints(const std::string& root, const RetentionPolicy& policy);

}  // namespace tensorpar
