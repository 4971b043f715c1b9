// The two-level communicator (comm/hybrid) over threads-backend groups with made-up hosts: every
// collective against a naive reduction of all ranks' inputs, at 2x2, 2x3, 3x2 and 2x4 ranks
// (hosts interleaved in the old rank order, so the host-major renumbering matters), in place and
// out of place; the flat fallbacks (one host, one rank per host, uneven hosts); splits that stay
// two-level; and 16-bit sums rounded once, not once per level.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <string>

#include "comm/hybrid/hierarchical_communicator.h"
#include "comm_test_util.h"

namespace tensorpar::testing {
namespace {

// Rank r's element i: k / 64 for an integer k in [-64, 64) (exact in every float type, and
// sums of a few exact in f32 in any order), or k itself for integer types.
double value(int rank, int64_t i, int salt) {
  uint64_t x = uint64_t(rank + 1) * 0x9e3779b97f4a7c15ull ^ uint64_t(i) * 0xbf58476d1ce4e5b9ull ^
               uint64_t(salt) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  x *= 0xd6e9e8b1a8e5c4a7ull;
  x ^= x >> 29;
  return double(int64_t(x % 128) - 64);
}

double scaled(double k, DType t) { return dtype_is_float(t) ? k / 64 : k; }

Bytes encode(const std::vector<double>& v, DType t) {
  const int64_t eb = comm_elem_bytes(t);
  Bytes b(v.size() * size_t(eb));
  for (size_t i = 0; i < v.size(); ++i) {
    std::byte* p = b.data() + i * size_t(eb);
    switch (t) {
      case DType::kF32: { const float f = float(v[i]); std::memcpy(p, &f, 4); break; }
      case DType::kBF16: { const bf16 h = f32_to_bf16(float(v[i])); std::memcpy(p, &h, 2); break; }
      case DType::kF16: { const f16 h = f32_to_f16(float(v[i])); std::memcpy(p, &h, 2); break; }
      case DType::kI32: { const int32_t k = int32_t(v[i]); std::memcpy(p, &k, 4); break; }
      default: { const int64_t k = int64_t(v[i]); std::memcpy(p, &k, 8); break; }
    }
  }
  return b;
}

std::vector<double> inputs(int rank, int64_t n, DType t, int salt) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = scaled(value(rank, i, salt), t);
  return v;
}

double reduce(double a, double b, ReduceOp op) {
  return op == ReduceOp::kSum ? a + b : op == ReduceOp::kMax ? std::max(a, b) : std::min(a, b);
}

const DType kTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};

// Every collective of `c` (n ranks) against the naive results; failures counted.
void check_collectives(Communicator& c, std::atomic<int>& failures) {
  const int n = c.size(), me = c.rank();
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      ++failures;
      ADD_FAILURE() << what << " (rank " << me << " of " << c.name() << ")";
    }
  };
  int salt = 0;
  for (DType t : kTypes) {
    for (ReduceOp op : kOps) {
      // Under HierarchicalCommunicator::kTwoLevelMinBytes the flat group does it; 40000 elements
      // (80 KB of bf16 and more) take the two levels.
      for (int64_t count : {1, 5, 37, 1001, 40000}) {
        for (bool in_place : {false, true}) {
          ++salt;
          std::vector<double> want = inputs(0, count, t, salt);
          for (int r = 1; r < n; ++r) {
            const auto x = inputs(r, count, t, salt);
            for (size_t i = 0; i < want.size(); ++i) want[i] = reduce(want[i], x[i], op);
          }
          Bytes in = encode(inputs(me, count, t, salt), t), out = poisoned(in.size());
          c.all_reduce(in.data(), in_place ? in.data() : out.data(), count, t, op);
          expect((in_place ? in : out) == encode(want, t),
                 detail::concat("all_reduce ", dtype_name(t), " ", reduce_op_name(op), " n=", count,
                                in_place ? " in place" : ""));
        }
      }
      for (int64_t count : {1, 3, 65}) {
        for (bool in_place : {false, true}) {
          ++salt;
          std::vector<double> want = inputs(0, count * n, t, salt);
          for (int r = 1; r < n; ++r) {
            const auto x = inputs(r, count * n, t, salt);
            for (size_t i = 0; i < want.size(); ++i) want[i] = reduce(want[i], x[i], op);
          }
          Bytes in = encode(inputs(me, count * n, t, salt), t);
          Bytes out = poisoned(size_t(count * comm_elem_bytes(t)));
          c.reduce_scatter(in.data(), in_place ? in.data() : out.data(), count, t, op);
          const Bytes got = in_place ? Bytes(in.begin(), in.begin() + std::ptrdiff_t(out.size())) : out;
          const std::vector<double> mine(want.begin() + me * count, want.begin() + (me + 1) * count);
          expect(got == encode(mine, t), detail::concat("reduce_scatter ", dtype_name(t), " ",
                                                        reduce_op_name(op), " n=", count,
                                                        in_place ? " in place" : ""));
        }
      }
    }
    for (int64_t count : {1, 7, 100}) {
      for (bool in_place : {false, true}) {
        ++salt;
        std::vector<double> want;
        for (int r = 0; r < n; ++r) {
          const auto x = inputs(r, count, t, salt);
          want.insert(want.end(), x.begin(), x.end());
        }
        const Bytes in = encode(inputs(me, count, t, salt), t);
        Bytes out = poisoned(size_t(n * count * comm_elem_bytes(t)));
        std::byte* slot = out.data() + me * count * comm_elem_bytes(t);
        if (in_place) std::memcpy(slot, in.data(), in.size());
        c.all_gather(in_place ? slot : in.data(), out.data(), count, t);
        expect(out == encode(want, t), detail::concat("all_gather ", dtype_name(t), " n=", count,
                                                      in_place ? " in place" : ""));
      }
      for (int root = 0; root < n; ++root) {
        ++salt;
        const auto want = inputs(root, count, t, salt);
        Bytes buf = me == root ? encode(want, t) : poisoned(size_t(count * comm_elem_bytes(t)));
        c.broadcast(buf.data(), count, t, root);
        expect(buf == encode(want, t), detail::concat("broadcast ", dtype_name(t), " root ", root));
      }
    }
  }
  // Point to point and all_to_all take the flat path.
  float mine = float(me), got = -1;
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  if (me % 2 == 0) {
    c.send(&mine, 1, DType::kF32, next);
    c.recv(&got, 1, DType::kF32, prev);
  } else {
    c.recv(&got, 1, DType::kF32, prev);
    c.send(&mine, 1, DType::kF32, next);
  }
  expect(got == float(prev), "send/recv ring");
  std::vector<int64_t> counts(static_cast<size_t>(n), 1);
  std::vector<int32_t> to(static_cast<size_t>(n)), from(static_cast<size_t>(n), -1);
  for (int r = 0; r < n; ++r) to[size_t(r)] = me * 100 + r;
  c.all_to_all(to.data(), counts, from.data(), counts, DType::kI32);
  for (int r = 0; r < n; ++r) expect(from[size_t(r)] == r * 100 + me, "all_to_all");
  c.barrier();
}

struct Layout {
  int ranks;
  std::function<int64_t(int)> host;  // of the threads world's rank
  bool two_level;
  std::string what;
};

void run_layout(const Layout& l) {
  SCOPED_TRACE(l.what);
  std::atomic<int> failures{0};
  run_threads(l.ranks, [&](Communicator& world) {
    const int64_t host = l.host(world.rank());
    auto h = make_hierarchical(world.split(0, world.rank()), host);
    EXPECT_EQ(h->size(), l.ranks);
    EXPECT_EQ(h->name().starts_with("hybrid["), l.two_level) << h->name();
    // Host-major: the hosts of ranks 0, 1, 2, ... come in blocks.
    std::vector<int64_t> hosts(static_cast<size_t>(l.ranks));
    h->all_gather(&host, hosts.data(), 1, DType::kI64);
    for (int r = 1; r < l.ranks; ++r) {
      const bool seen_before = std::find(hosts.begin(), hosts.begin() + r - 1, hosts[size_t(r)]) !=
                               hosts.begin() + r - 1;
      if (hosts[size_t(r)] != hosts[size_t(r - 1)] && seen_before) {
        ++failures;
        ADD_FAILURE() << "rank " << r << " returns to host " << hosts[size_t(r)];
      }
    }
    check_collectives(*h, failures);
    // Sub-groups: every other rank (spans the hosts), and the first half.
    auto odd_even = h->split(h->rank() % 2, h->rank());
    check_collectives(*odd_even, failures);
    auto halves = h->split(h->rank() < l.ranks / 2 ? 0 : 1, h->rank());
    check_collectives(*halves, failures);
  });
  EXPECT_EQ(failures.load(), 0);
}

TEST(Hierarchical, TwoHostsOfTwo) { run_layout({4, [](int r) { return r % 2; }, true, "2 x 2"}); }
TEST(Hierarchical, TwoHostsOfThree) { run_layout({6, [](int r) { return 10 + r / 3; }, true, "2 x 3"}); }
TEST(Hierarchical, ThreeHostsOfTwo) { run_layout({6, [](int r) { return r % 3; }, true, "3 x 2"}); }
TEST(Hierarchical, TwoHostsOfFour) { run_layout({8, [](int r) { return (r * 5) % 2; }, true, "2 x 4"}); }
TEST(Hierarchical, FlatWhenOneHostOneRankPerHostOrUneven) {
  run_layout({4, [](int) { return 7; }, false, "one host"});
  run_layout({3, [](int r) { return r; }, false, "one rank per host"});
  run_layout({3, [](int r) { return r == 1; }, false, "uneven hosts"});
}

// A split that spans hosts evenly stays two-level; one inside a host or across one rank per host
// is a plain group.
TEST(Hierarchical, SplitsKeepTwoLevelsWhereTheySpanHostsEvenly) {
  run_threads(8, [&](Communicator& world) {
    auto h = make_hierarchical(world.split(0, world.rank()), world.rank() / 4);  // 2 hosts x 4
    auto pairs_across = h->split(h->rank() % 2, h->rank());  // 2 per host on 2 hosts
    EXPECT_TRUE(pairs_across->name().starts_with("hybrid[2 hosts x 2]")) << pairs_across->name();
    auto inside = h->split(h->rank() / 4, h->rank());
    EXPECT_FALSE(inside->name().starts_with("hybrid")) << inside->name();
    auto one_per_host = h->split(h->rank() % 4, h->rank());
    EXPECT_FALSE(one_per_host->name().starts_with("hybrid")) << one_per_host->name();
    EXPECT_EQ(h->split(-1, 0), nullptr);  // opting out, as the flat backend
  });
}

// bf16 values in [1, 2) with 8 significant bits: the f32 sum of four is exact, rounded to bf16
// once. Rounding after the local level and again after the cross level would differ.
static_assert(65536 * 2 >= HierarchicalCommunicator::kTwoLevelMinBytes);
TEST(Hierarchical, SixteenBitSumsRoundOnce) {
  std::atomic<int> failures{0};
  run_threads(4, [&](Communicator& world) {
    auto h = make_hierarchical(world.split(0, world.rank()), world.rank() / 2);
    const int64_t n = 65536;  // 128 KB: the two-level path
    auto x = [](int r, int64_t i) { return 1.0f + float((value(r, i, 99) + 64) * 2 + (r % 2)) / 256.0f; };
    std::vector<bf16> mine(static_cast<size_t>(n)), out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) mine[size_t(i)] = f32_to_bf16(x(h->rank(), i));
    h->all_reduce(mine.data(), out.data(), n, DType::kBF16, ReduceOp::kSum);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      float sum = 0;
      for (int r = 0; r < 4; ++r) sum += bf16_to_f32(f32_to_bf16(x(r, i)));
      wrong += f32_to_bf16(sum).bits != out[size_t(i)].bits;
    }
    if (wrong) {
      ++failures;
      ADD_FAILURE() << wrong << " of " << n << " sums not rounded once";
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace tensorpar::testing
