// DeviceMesh: the world cut into TP, DP, EP and PP groups. Rank
// order follows Megatron/torchtitan: TP varies fastest (neighbours share a node), then DP, then
// PP: world rank = tp_rank + tp * (dp_rank + dp * pp_rank). EP groups are carved out of DP:
// expert-parallel peers are `ep` consecutive DP ranks (ep must divide dp); the DP ranks holding
// the same experts (same dp_rank % ep) form the expert-data-parallel (EDP) group, over which
// expert gradients are summed.
#pragma once

#include <memory>
#include <optional>

#include "comm/communicator.h"
#include "parallel/parallel_context.h"

namespace tensorpar {

struct MeshSizes {
  int tp = 1;
  int dp = 1;
  int pp = 1;
  int ep = 1;  // divides dp
};

class DeviceMesh {
 public:
  // Collective over `world` (every rank calls it, in the same order as other splits); the world
  // size must equal tp * dp * pp. `world` must outlive the mesh.
  DeviceMesh(Communicator& world, const MeshSizes& sizes);
  DeviceMesh(const DeviceMesh&) = delete;
  DeviceMesh& operator=(const DeviceMesh&) = delete;

  const MeshSizes& sizes() const { return sizes_; }
  Communicator& world() { return world_; }
  Communicator& tp() { return *tp_; }
  Communicator& dp() { return *dp_; }
  Communicator& pp() { return *pp_; }
  Communicator& ep() { return *ep_; }
  Communicator& edp() { return *edp_; }
  // References to the groups above, to pass to layers.
  ParallelContext& context() { return *ctx_; }

  int tp_rank() const { return tp_->rank(); }
  int dp_rank() const { return dp_->rank(); }
  int pp_rank() const { return pp_->rank(); }
  int ep_rank() const { return ep_->rank(); }

  // World rank of the given coordinates (the rank order above).
  static int world_rank_of(const MeshSizes& s, int tp_rank, int dp_rank, int pp_rank) {
    return tp_rank + s.tp * (dp_rank + s.dp * pp_rank);
  }

 private:
  Communicator& world_;
  MeshSizes sizes_;
  std::unique_ptr<Communicator> tp_, dp_, pp_, ep_, edp_;
  std::optional<ParallelContext> ctx_;  // bound once the groups exist
};

}  // namespace tensorpar
