// The threads backend's chunked reductions (AVX-512 or portable, whichever this CPU runs)
// against their naive one-element reference, bitwise, for every dtype and op, awkward sizes,
// several sources and outputs, and outputs aliasing inputs.
#include "comm/threads/reduce_kernels.h"

#include <gtest/gtest.h>

#include "comm_test_util.h"

namespace tensorpar::testing {
namespace {

TEST(ReduceKernels, MatchNaiveReferenceBitwise) {
  TP_SEED_TRACE();
  Rng rng(7);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
      for (int64_t count : {int64_t(1), int64_t(7), int64_t(33), int64_t(577), int64_t(2051)}) {
        for (int n_src : {1, 2, 3, 5}) {
          std::vector<Bytes> srcs;
          std::vector<const void*> sp;
          for (int k = 0; k < n_src; ++k) srcs.push_back(random_bytes(rng, t, count));
          for (const Bytes& s : srcs) sp.push_back(s.data());
          const size_t nb = srcs[0].size();
          Bytes fast_a = poisoned(nb), fast_b = poisoned(nb), naive = poisoned(nb);
          void* fast_dsts[] = {fast_a.data(), fast_b.data()};
          void* naive_dst[] = {naive.data()};
          // A sub-range [begin, end) too, as the direct path reduces one slice.
          const int64_t begin = count > 3 ? 3 : 0;
          threads::reduce_range(t, op, sp.data(), n_src, fast_dsts, 2, begin, count, /*stream=*/count % 2 == 1);
          threads::reduce_range_naive(t, op, sp.data(), n_src, naive_dst, 1, begin, count);
          ASSERT_TRUE(fast_a == naive && fast_b == naive)
              << dtype_name(t) << " " << reduce_op_name(op) << " count " << count << " n_src " << n_src;
          // The independent test reference agrees on the reduced range.
          std::vector<const Bytes*> xs;
          for (const Bytes& s : srcs) xs.push_back(&s);
          const Bytes want = reference_reduce(t, op, xs, begin, count - begin);
          const int64_t eb = comm_elem_bytes(t);
          ASSERT_TRUE(Bytes(naive.begin() + begin * eb, naive.end()) == want);
          // In place: the output is the last source.
          Bytes last = srcs.back();
          sp.back() = last.data();
          void* alias[] = {last.data()};
          threads::reduce_range(t, op, sp.data(), n_src, alias, 1, begin, count);
          ASSERT_TRUE(Bytes(last.begin() + begin * eb, last.end()) == want) << dtype_name(t) << " in place";
        }
      }
    }
  }
}

}  // namespace
}  // namespace tensorpar::testing
