// DeviceMesh group construction (see mesh.h).
#include "parallel/mesh.h"

#include "core/error.h"

namespace tensorpar {
namespace {

std::unique_ptr<Communicator> checked_split(Communicator& world, const MeshSizes& s, int color,
                                            int key, int expect_size, const char* what) {
  auto c = world.split(color, key);
  TP_ASSERT(c && c->size() == expect_size, what, " group has ", c ? c->size() : -1,
            " ranks, expected ", expect_size, " (tp ", s.tp, " dp ", s.dp, " pp ", s.pp, ")");
  return c;
}

const MeshSizes& validated(Communicator& world, const MeshSizes& s) {
  TP_CHECK(s.tp >= 1 && s.dp >= 1 && s.pp >= 1 && s.ep >= 1, "[DeviceMesh] sizes: got tp ", s.tp,
           " dp ", s.dp, " pp ", s.pp, " ep ", s.ep, ", expected all >= 1");
  TP_CHECK(int64_t(s.tp) * s.dp * s.pp == world.size(), "[DeviceMesh] tp * dp * pp: got ", s.tp,
           " * ", s.dp, " * ", s.pp, " = ", int64_t(s.tp) * s.dp * s.pp, ", expected the world size ",
           world.size(), " (", world.name(), ")");
  TP_CHECK(s.dp % s.ep == 0, "[DeviceMesh] ep: got ", s.ep, ", expected a divisor of dp ", s.dp);
  return s;
}

}  // namespace

DeviceMesh::DeviceMesh(Communicator& world, const MeshSizes& sizes)
    : world_(world), sizes_(validated(world, sizes)) {
  // Coordinates of this rank: world = tp_rank + tp * (dp_rank + dp * pp_rank).
  const int r = world.rank(), s_tp = sizes_.tp, s_dp = sizes_.dp;
  const int tp_rank = r % s_tp, dp_rank = (r / s_tp) % s_dp, pp_rank = r / (s_tp * s_dp);
  // Same (dp, pp): a TP group. Same (tp, pp): a DP group. Same (tp, dp): a PP group.
  tp_ = checked_split(world, sizes_, dp_rank + s_dp * pp_rank, tp_rank, s_tp, "tp");
  dp_ = checked_split(world, sizes_, tp_rank + s_tp * pp_rank, dp_rank, s_dp, "dp");
  pp_ = checked_split(world, sizes_, tp_rank + s_tp * dp_rank, pp_rank, sizes_.pp, "pp");
  // EP: ep consecutive dp ranks with the same tp and pp.
  const int ep_block = dp_rank / sizes_.ep;
  ep_ = checked_split(world, sizes_, tp_rank + s_tp * (ep_block + s_dp * pp_rank),
                      dp_rank % sizes_.ep, sizes_.ep, "ep");
  // EDP: the dp ranks at the same place in their EP groups.
  edp_ = checked_split(world, sizes_, tp_rank + s_tp * (dp_rank % sizes_.ep + s_dp * pp_rank), ep_block,
                       s_dp / sizes_.ep, "edp");
  ctx_.emplace(ParallelContext{*tp_, *dp_, *pp_, *ep_});
}

}  // namespace tensorpar
