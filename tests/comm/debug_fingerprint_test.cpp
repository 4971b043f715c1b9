// Fingerprints of collectives: the printed form, packing for an all-gather, and the mismatch
// message naming both sides.
#include "comm/debug_fingerprint.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"

namespace tensorpar {
namespace {

TEST(DebugFingerprint, DescribesEachKindOfOp) {
  EXPECT_EQ(describe_fingerprint(make_fingerprint(CommOp::kAllReduce, DType::kF32, 1024, ReduceOp::kSum, -1, 7)),
            "all_reduce(f32, 1024, sum) #7");
  EXPECT_EQ(describe_fingerprint(make_fingerprint(CommOp::kBroadcast, DType::kBF16, 10, ReduceOp::kSum, 1, 3)),
            "broadcast(bf16, 10, root 1) #3");
  EXPECT_EQ(describe_fingerprint(make_fingerprint(CommOp::kBarrier, DType::kF32, 0, ReduceOp::kSum, -1, 2)),
            "barrier #2");
  EXPECT_EQ(describe_fingerprint(make_fingerprint(CommOp::kAllGather, DType::kI64, 5, ReduceOp::kSum, -1, 1)),
            "all_gather(i64, 5) #1");
}

TEST(DebugFingerprint, PackRoundTrips) {
  const OpFingerprint fp = make_fingerprint(CommOp::kReduceScatter, DType::kF16, 123456789012, ReduceOp::kMin, 3, 99);
  const auto words = pack_fingerprint(fp);
  EXPECT_EQ(unpack_fingerprint(words), fp);
}

TEST(DebugFingerprint, MismatchNamesBothSides) {
  std::vector<OpFingerprint> all(3, make_fingerprint(CommOp::kAllReduce, DType::kF32, 1024, ReduceOp::kSum, -1, 7));
  EXPECT_NO_THROW(verify_fingerprints(all, "all_reduce", "g"));
  all[2] = make_fingerprint(CommOp::kAllGather, DType::kF32, 512, ReduceOp::kSum, -1, 7);
  try {
    verify_fingerprints(all, "all_reduce", "threads:world");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[all_reduce] mismatched collectives on threads:world: rank 0 called all_reduce(f32, "
                           "1024, sum) #7 but rank 2 called all_gather(f32, 512) #7");
  }
}

TEST(DebugFingerprint, CheckUsesTheGivenGather) {
  // A fake two-rank gather: the peer called with a different sequence number.
  const OpFingerprint mine = make_fingerprint(CommOp::kBarrier, DType::kF32, 0, ReduceOp::kSum, -1, 4);
  OpFingerprint peer = mine;
  peer.seq = 5;
  auto gather = [&](const int64_t* in, int64_t* out) {
    for (int i = 0; i < kFingerprintWords; ++i) out[i] = in[i];
    const auto p = pack_fingerprint(peer);
    for (int i = 0; i < kFingerprintWords; ++i) out[kFingerprintWords + i] = p[size_t(i)];
  };
  EXPECT_THROW(check_fingerprints(mine, 2, "g", gather), Error);
  peer.seq = 4;
  EXPECT_NO_THROW(check_fingerprints(mine, 2, "g", gather));
}

}  // namespace
}  // namespace tensorpar
