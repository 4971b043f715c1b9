// DeviceMesh: group sizes, ranks and members follow the rank order TP fastest, then DP, then PP.
#include "parallel/mesh.h"

#include <gtest/gtest.h>

#include <mutex>

#include "parallel_test_util.h"

namespace tensorpar {
namespace {

using testing::run_ranks;

// World ranks of the members of group c, in group-rank order.
std::vector<int32_t> members(Communicator& c, int world_rank) {
  std::vector<int32_t> out(static_cast<size_t>(c.size()));
  const int32_t me = world_rank;
  c.all_gather(&me, out.data(), 1, DType::kI32);
  return out;
}

struct Seen {
  int tp_rank, dp_rank, pp_rank, ep_rank;
  std::vector<int32_t> tp, dp, pp, ep;
};

void check_mesh(const MeshSizes& s) {
  SCOPED_TRACE(::testing::Message() << "tp " << s.tp << " dp " << s.dp << " pp " << s.pp
                                    << " ep " << s.ep);
  const int world = s.tp * s.dp * s.pp;
  std::vector<Seen> seen(static_cast<size_t>(world));
  run_ranks(world, [&](Communicator& w) {
    DeviceMesh mesh(w, s);
    ParallelContext& ctx = mesh.context();
    const int r = w.rank();
    Seen& out = seen[size_t(r)];
    out = {ctx.tp.rank(), ctx.dp.rank(), ctx.pp.rank(), ctx.ep.rank(),
           members(ctx.tp, r), members(ctx.dp, r), members(ctx.pp, r), members(ctx.ep, r)};
    EXPECT_EQ(&ctx.tp, &mesh.tp());
  });
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE(::testing::Message() << "world rank " << r);
    const Seen& x = seen[size_t(r)];
    const int t = r % s.tp, d = (r / s.tp) % s.dp, p = r / (s.tp * s.dp);
    EXPECT_EQ(x.tp_rank, t);
    EXPECT_EQ(x.dp_rank, d);
    EXPECT_EQ(x.pp_rank, p);
    EXPECT_EQ(x.ep_rank, d % s.ep);
    EXPECT_EQ(DeviceMesh::world_rank_of(s, t, d, p), r);
    std::vector<int32_t> tp, dp, pp, ep;
    for (int i = 0; i < s.tp; ++i) tp.push_back(DeviceMesh::world_rank_of(s, i, d, p));
    for (int i = 0; i < s.dp; ++i) dp.push_back(DeviceMesh::world_rank_of(s, t, i, p));
    for (int i = 0; i < s.pp; ++i) pp.push_back(DeviceMesh::world_rank_of(s, t, d, i));
    for (int i = 0; i < s.ep; ++i)
      ep.push_back(DeviceMesh::world_rank_of(s, t, d / s.ep * s.ep + i, p));
    EXPECT_EQ(x.tp, tp);
    EXPECT_EQ(x.dp, dp);
    EXPECT_EQ(x.pp, pp);
    EXPECT_EQ(x.ep, ep);
  }
}

TEST(DeviceMesh, GroupsFollowTheRankOrder) {
  check_mesh({.tp = 1, .dp = 1, .pp = 1, .ep = 1});
  check_mesh({.tp = 2, .dp = 2, .pp = 1, .ep = 1});
  check_mesh({.tp = 3, .dp = 2, .pp = 1, .ep = 1});
  check_mesh({.tp = 2, .dp = 2, .pp = 2, .ep = 1});
  check_mesh({.tp = 2, .dp = 2, .pp = 2, .ep = 2});
  check_mesh({.tp = 1, .dp = 4, .pp = 1, .ep = 2});
}

TEST(DeviceMesh, WrongSizesThrow) {
  std::mutex mu;
  int thrown = 0;
  run_ranks(4, [&](Communicator& w) {
    for (const MeshSizes& s : {MeshSizes{.tp = 3, .dp = 1, .pp = 1, .ep = 1},
                               MeshSizes{.tp = 2, .dp = 2, .pp = 1, .ep = 3},
                               MeshSizes{.tp = 0, .dp = 4, .pp = 1, .ep = 1}}) {
      try {
        DeviceMesh mesh(w, s);
      } catch (const Error&) {
        std::lock_guard<std::mutex> lock(mu);
        ++thrown;
      }
    }
  });
  EXPECT_EQ(thrown, 12);
}

}  // namespace
}  // namespace tensorpar
