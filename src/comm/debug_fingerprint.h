// Collective fingerprints for TENSORPAR_COMM_DEBUG=1 (CommOptions::debug): before each collective
// the ranks exchange (op, dtype, count, root/peer, sequence number) and a mismatch becomes an Error
// naming both sides instead of a hang. Backend-neutral: each backend brings its own all-gather.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "comm/communicator.h"

namespace tensorpar {

enum class CommOp : uint8_t {
  kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllToAll, kBarrier, kSplit, kSend, kRecv
};
std::string_view comm_op_name(CommOp op);

struct OpFingerprint {
  CommOp op = CommOp::kBarrier;
  DType dtype = DType::kF32;
  ReduceOp reduce = ReduceOp::kSum;  // meaningful for all_reduce / reduce_scatter only
  int64_t count = 0;                 // elements per rank as the op's signature counts them
  int64_t root = -1;                 // broadcast root or send/recv peer; -1 when none
  uint64_t seq = 0;                  // collectives issued on this group so far, from 1
  bool operator==(const OpFingerprint&) const = default;
};

// The fingerprint of a call; ops without a dtype/count/root pass the defaults.
OpFingerprint make_fingerprint(CommOp op, DType dtype, int64_t count, ReduceOp reduce, int64_t root,
                               uint64_t seq);
// "all_reduce(f32, 1024, sum) #7", "broadcast(bf16, 10, root 1) #3", "barrier #2".
std::string describe_fingerprint(const OpFingerprint& fp);

// Four int64 words, so a backend can all-gather fingerprints as DType::kI64 (count 4).
inline constexpr int64_t kFingerprintWords = 4;
std::array<int64_t, kFingerprintWords> pack_fingerprint(const OpFingerprint& fp);
OpFingerprint unpack_fingerprint(std::span<const int64_t> words);

// Throws Error "[<where>] mismatched collectives on <group>: rank 0 called all_reduce(f32, 1024,
// sum) #7 but rank 1 called all_gather(f32, 512) #7" if any rank's fingerprint differs from rank 0's.
void verify_fingerprints(std::span<const OpFingerprint> all, std::string_view where,
                         std::string_view group);

// Gathers every rank's fingerprint with `gather` (in: kFingerprintWords words, out: size *
// kFingerprintWords words; a raw all-gather that does not itself check fingerprints) and verifies.
using FingerprintGather = std::function<void(const int64_t* in, int64_t* out)>;
void check_fingerprints(const OpFingerprint& mine, int size, std::string_view group,
                        const FingerprintGather& gather);

}  // namespace tensorpar
