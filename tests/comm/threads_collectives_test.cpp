// Every collective of the threads backend against a naive reference computed here from the
// known per-rank inputs: N = 1..8 (odd N too), all comm dtypes, sizes on both sides of the
// staging threshold, in-place and out-of-place; all-reduce results bitwise identical on all ranks.
#include <gtest/gtest.h>

#include <atomic>
#include <numeric>

#include "comm/threads/threads_backend.h"
#include "comm_test_util.h"

namespace tensorpar::testing {
namespace {

const DType kDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};

struct ReduceCase {
  DType dtype;
  ReduceOp op;
  int64_t count;
  bool in_place;
};

std::vector<ReduceCase> reduce_cases(int n) {
  std::vector<ReduceCase> cases;
  for (DType t : kDTypes)
    for (ReduceOp op : kOps)
      for (int64_t count : {int64_t(1), int64_t(7), int64_t(1000), int64_t(33000)})
        for (bool in_place : {false, true}) cases.push_back({t, op, count, in_place});
  if (n <= 3) {
    cases.push_back({DType::kF32, ReduceOp::kSum, kBigCount, false});
    cases.push_back({DType::kF32, ReduceOp::kSum, kBigCount + 5, true});
    cases.push_back({DType::kBF16, ReduceOp::kSum, kBigCount + 3, true});
  }
#if !defined(__SANITIZE_ADDRESS__)
  if (n == 2) cases.push_back({DType::kF32, ReduceOp::kSum, (int64_t(1) << 21) + 5, false});  // streaming stores
#endif
  return cases;
}

std::string describe(const ReduceCase& c) {
  return std::string(dtype_name(c.dtype)) + " " + std::string(reduce_op_name(c.op)) + " count=" +
         std::to_string(c.count) + (c.in_place ? " in-place" : " out-of-place");
}

class ThreadsCollectives : public ::testing::TestWithParam<int> {};

TEST_P(ThreadsCollectives, AllReduceMatchesReferenceBitwiseOnEveryRank) {
  TP_SEED_TRACE();
  const int n = GetParam();
  Rng rng(static_cast<uint64_t>(n));
  const auto cases = reduce_cases(n);
  std::vector<std::vector<Bytes>> inputs(cases.size()), outputs(cases.size());
  for (size_t c = 0; c < cases.size(); ++c) {
    for (int r = 0; r < n; ++r) inputs[c].push_back(random_bytes(rng, cases[c].dtype, cases[c].count));
    outputs[c].resize(size_t(n));
  }
  run_threads(n, [&](Communicator& comm) {
    const int r = comm.rank();
    for (size_t c = 0; c < cases.size(); ++c) {
      const ReduceCase& k = cases[c];
      Bytes in = inputs[c][size_t(r)];
      if (k.in_place) {
        comm.all_reduce(in.data(), in.data(), k.count, k.dtype, k.op);
        outputs[c][size_t(r)] = std::move(in);
      } else {
        Bytes out = poisoned(in.size());
        comm.all_reduce(in.data(), out.data(), k.count, k.dtype, k.op);
        EXPECT_EQ(in, inputs[c][size_t(r)]) << "input changed: " << describe(k);
        outputs[c][size_t(r)] = std::move(out);
      }
    }
  });
  for (size_t c = 0; c < cases.size(); ++c) {
    std::vector<const Bytes*> xs;
    for (const Bytes& b : inputs[c]) xs.push_back(&b);
    const Bytes want = reference_reduce(cases[c].dtype, cases[c].op, xs, 0, cases[c].count);
    for (int r = 0; r < n; ++r)
      ASSERT_TRUE(outputs[c][size_t(r)] == want) << describe(cases[c]) << " rank " << r << " of " << n;
  }
}

TEST_P(ThreadsCollectives, ReduceScatterMatchesReference) {
  TP_SEED_TRACE();
  const int n = GetParam();
  Rng rng(uint64_t(n) + 100);
  std::vector<ReduceCase> cases;
  for (DType t : kDTypes)
    for (int64_t count : {int64_t(1), int64_t(7), int64_t(1000), int64_t(9000)})
      for (bool in_place : {false, true}) cases.push_back({t, count == 7 ? ReduceOp::kMax : ReduceOp::kSum, count, in_place});
  cases.push_back({DType::kF32, ReduceOp::kMin, 1000, false});
  std::vector<std::vector<Bytes>> inputs(cases.size()), outputs(cases.size());
  for (size_t c = 0; c < cases.size(); ++c) {
    for (int r = 0; r < n; ++r) inputs[c].push_back(random_bytes(rng, cases[c].dtype, cases[c].count * n));
    outputs[c].resize(size_t(n));
  }
  run_threads(n, [&](Communicator& comm) {
    const int r = comm.rank();
    for (size_t c = 0; c < cases.size(); ++c) {
      const ReduceCase& k = cases[c];
      const int64_t block = k.count * comm_elem_bytes(k.dtype);
      Bytes in = inputs[c][size_t(r)];
      if (k.in_place) {
        comm.reduce_scatter(in.data(), in.data() + r * block, k.count, k.dtype, k.op);
        outputs[c][size_t(r)] = Bytes(in.begin() + r * block, in.begin() + (r + 1) * block);
      } else {
        Bytes out = poisoned(size_t(block));
        comm.reduce_scatter(in.data(), out.data(), k.count, k.dtype, k.op);
        outputs[c][size_t(r)] = std::move(out);
      }
    }
  });
  for (size_t c = 0; c < cases.size(); ++c) {
    std::vector<const Bytes*> xs;
    for (const Bytes& b : inputs[c]) xs.push_back(&b);
    for (int r = 0; r < n; ++r) {
      const Bytes want = reference_reduce(cases[c].dtype, cases[c].op, xs, r * cases[c].count, cases[c].count);
      ASSERT_TRUE(outputs[c][size_t(r)] == want) << describe(cases[c]) << " rank " << r << " of " << n;
    }
  }
}

TEST_P(ThreadsCollectives, AllGatherMatchesReference) {
  TP_SEED_TRACE();
  const int n = GetParam();
  Rng rng(uint64_t(n) + 200);
  struct Case { DType dtype; int64_t count; bool in_place; };
  std::vector<Case> cases;
  for (DType t : kDTypes)
    for (int64_t count : {int64_t(1), int64_t(7), int64_t(1000), int64_t(20000)})
      for (bool in_place : {false, true}) cases.push_back({t, count, in_place});
  std::vector<std::vector<Bytes>> inputs(cases.size()), outputs(cases.size());
  for (size_t c = 0; c < cases.size(); ++c) {
    for (int r = 0; r < n; ++r) inputs[c].push_back(random_bytes(rng, cases[c].dtype, cases[c].count));
    outputs[c].resize(size_t(n));
  }
  run_threads(n, [&](Communicator& comm) {
    const int r = comm.rank();
    for (size_t c = 0; c < cases.size(); ++c) {
      const Case& k = cases[c];
      const size_t block = inputs[c][size_t(r)].size();
      Bytes out = poisoned(block * size_t(n));
      if (k.in_place) {
        std::memcpy(out.data() + size_t(r) * block, inputs[c][size_t(r)].data(), block);
        comm.all_gather(out.data() + size_t(r) * block, out.data(), k.count, k.dtype);
      } else {
        comm.all_gather(inputs[c][size_t(r)].data(), out.data(), k.count, k.dtype);
      }
      outputs[c][size_t(r)] = std::move(out);
    }
  });
  for (size_t c = 0; c < cases.size(); ++c) {
    Bytes want;
    for (const Bytes& b : inputs[c]) want.insert(want.end(), b.begin(), b.end());
    for (int r = 0; r < n; ++r)
      ASSERT_TRUE(outputs[c][size_t(r)] == want) << dtype_name(cases[c].dtype) << " count " << cases[c].count
                                                 << " rank " << r << " of " << n;
  }
}

TEST_P(ThreadsCollectives, BroadcastFromEveryKindOfRoot) {
  TP_SEED_TRACE();
  const int n = GetParam();
  Rng rng(uint64_t(n) + 300);
  struct Case { DType dtype; int64_t count; int root; };
  std::vector<Case> cases;
  for (DType t : {DType::kF32, DType::kBF16, DType::kI64})
    for (int64_t count : {int64_t(1), int64_t(7), int64_t(1000), int64_t(40000)})
      for (int root : {0, n - 1, n / 2}) cases.push_back({t, count, root});
  std::vector<Bytes> inputs;
  for (const Case& k : cases) inputs.push_back(random_bytes(rng, k.dtype, k.count));
  std::vector<std::vector<Bytes>> outputs(cases.size(), std::vector<Bytes>(size_t(n)));
  run_threads(n, [&](Communicator& comm) {
    for (size_t c = 0; c < cases.size(); ++c) {
      Bytes data = comm.rank() == cases[c].root ? inputs[c] : poisoned(inputs[c].size());
      comm.broadcast(data.data(), cases[c].count, cases[c].dtype, cases[c].root);
      outputs[c][size_t(comm.rank())] = std::move(data);
    }
  });
  for (size_t c = 0; c < cases.size(); ++c)
    for (int r = 0; r < n; ++r)
      ASSERT_TRUE(outputs[c][size_t(r)] == inputs[c]) << "case " << c << " rank " << r << " of " << n;
}

TEST_P(ThreadsCollectives, AllToAllWithUnevenCounts) {
  const int n = GetParam();
  // Rank s sends count(s, t) elements to rank t (some zero), each tagged with (s, t, i).
  auto count = [](int s, int t) { return int64_t((s * 3 + t * 5 + 1) % 4) * (t == 1 ? 700 : 1); };
  auto value = [](int s, int t, int64_t i) { return int64_t(s) * 1000000 + t * 10000 + i; };
  std::vector<std::vector<int64_t>> got(static_cast<size_t>(n));
  std::vector<std::vector<int64_t>> want(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t)
    for (int s = 0; s < n; ++s)
      for (int64_t i = 0; i < count(s, t); ++i) want[size_t(t)].push_back(value(s, t, i));
  run_threads(n, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<int64_t> send_counts, recv_counts, in;
    for (int t = 0; t < n; ++t) {
      send_counts.push_back(count(r, t));
      recv_counts.push_back(count(t, r));
      for (int64_t i = 0; i < count(r, t); ++i) in.push_back(value(r, t, i));
    }
    std::vector<int64_t> out(want[size_t(r)].size(), -1);
    for (int rep = 0; rep < 3; ++rep) comm.all_to_all(in.data(), send_counts, out.data(), recv_counts, DType::kI64);
    got[size_t(r)] = out;
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(got[size_t(r)], want[size_t(r)]) << "rank " << r << " of " << n;
}

TEST_P(ThreadsCollectives, SendRecvRingAndBarrier) {
  const int n = GetParam();
  std::atomic<int> arrived{0};
  std::atomic<int> failures{0};
  run_threads(n, [&](Communicator& comm) {
    const int r = comm.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
    for (int step = 0; step < 20; ++step) {
      // Everyone sends before receiving: sends are buffered, so the ring cannot deadlock.
      const int64_t len = 1 + (step * 37) % 3000;
      std::vector<float> out(static_cast<size_t>(len)), in(static_cast<size_t>(len), std::numeric_limits<float>::quiet_NaN());
      for (int64_t i = 0; i < len; ++i) out[size_t(i)] = float(r * 100000 + step * 1000 + i % 1000);
      comm.send(out.data(), len, DType::kF32, next);
      comm.recv(in.data(), len, DType::kF32, prev);
      for (int64_t i = 0; i < len; ++i)
        if (in[size_t(i)] != float(prev * 100000 + step * 1000 + i % 1000)) failures++;
      arrived++;
      comm.barrier();
      if (arrived.load() < (step + 1) * n) failures++;
      comm.barrier();
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Ranks, ThreadsCollectives, ::testing::Range(1, 9));

TEST(ThreadsCollectivesStress, ManySmallAllReducesStayConsistent) {
  // Back-to-back ops of changing sizes and kinds exercise the double-buffered staging: a rank
  // that races ahead must never overwrite what a slower peer still reads.
  const int n = 5;
  std::atomic<int> failures{0};
  run_threads(n, [&](Communicator& comm) {
    const int r = comm.rank();
    for (int it = 0; it < 600; ++it) {
      const int64_t len = 1 + (it * 131) % (it % 7 == 0 ? 40000 : 600);
      std::vector<float> x(size_t(len), float(r + it));
      comm.all_reduce(x.data(), x.data(), len, DType::kF32, ReduceOp::kSum);
      const float want = float(n * (n - 1) / 2 + n * it);
      for (float v : x)
        if (v != want) { failures++; break; }
      if (it % 5 == 0) {
        int64_t b = r == it % n ? it : -1;
        comm.broadcast(&b, 1, DType::kI64, it % n);
        if (b != it) failures++;
      }
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadsCollectivesStress, SixteenRanksOnFewCoresMakeProgress) {
  const int n = 16;
  std::atomic<int> failures{0};
  run_threads(n, [&](Communicator& comm) {
    for (int it = 0; it < 30; ++it) {
      std::vector<int32_t> x(size_t(100 + it * 500), comm.rank() + 1);
      comm.all_reduce(x.data(), x.data(), int64_t(x.size()), DType::kI32, ReduceOp::kSum);
      for (int32_t v : x)
        if (v != n * (n + 1) / 2) { failures++; break; }
    }
    comm.barrier();
  });
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadsWorld, CreateWorldDirectlyAndSizeOneShortCircuits) {
  auto world = threads::create_world(1, test_comm_options());
  Communicator& c = *world[0];
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(c.name(), "threads:world");
  std::vector<float> in{1, 2, 3}, out(3, std::numeric_limits<float>::quiet_NaN());
  c.all_reduce(in.data(), out.data(), 3, DType::kF32, ReduceOp::kMax);
  EXPECT_EQ(out, in);
  c.broadcast(std::span<float>(in), 0);
  c.barrier();
  auto sub = c.split(3, 0);
  ASSERT_TRUE(sub);
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(c.split(-1, 0), nullptr);
  EXPECT_THROW(threads::create_world(0, test_comm_options()), Error);
}

TEST(ThreadsWorld, BadArgumentsThrow) {
  auto world = threads::create_world(1, test_comm_options());
  float x = 0;
  EXPECT_THROW(world[0]->broadcast(&x, 1, DType::kF32, 1), Error);
  EXPECT_THROW(world[0]->all_reduce(&x, &x, -1, DType::kF32, ReduceOp::kSum), Error);
  EXPECT_THROW(world[0]->all_reduce(&x, &x, 1, DType::kU8, ReduceOp::kSum), Error);
  EXPECT_THROW(world[0]->send(&x, 1, DType::kF32, 2), Error);
}

}  // namespace
}  // namespace tensorpar::testing
