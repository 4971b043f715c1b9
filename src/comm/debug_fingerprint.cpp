// Fingerprint packing, printing and comparison for the debug check of collectives.
#include "comm/debug_fingerprint.h"

#include <vector>

#include "core/error.h"

namespace tensorpar {

std::string_view comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::kAllReduce: return "all_reduce";
    case CommOp::kAllGather: return "all_gather";
    case CommOp::kReduceScatter: return "reduce_scatter";
    case CommOp::kBroadcast: return "broadcast";
    case CommOp::kAllToAll: return "all_to_all";
    case CommOp::kBarrier: return "barrier";
    case CommOp::kSplit: return "split";
    case CommOp::kSend: return "send";
    case CommOp::kRecv: return "recv";
  }
  return "?";
}

OpFingerprint make_fingerprint(CommOp op, DType dtype, int64_t count, ReduceOp reduce, int64_t root,
                               uint64_t seq) {
  OpFingerprint fp;
  fp.op = op;
  fp.dtype = dtype;
  fp.reduce = reduce;
  fp.count = count;
  fp.root = root;
  fp.seq = seq;
  return fp;
}

static bool has_payload(CommOp op) {
  return op != CommOp::kBarrier && op != CommOp::kSplit;
}
static bool has_reduce(CommOp op) {
  return op == CommOp::kAllReduce || op == CommOp::kReduceScatter;
}

std::string describe_fingerprint(const OpFingerprint& fp) {
  std::string s(comm_op_name(fp.op));
  if (has_payload(fp.op)) {
    s += "(";
    s += dtype_name(fp.dtype);
    if (fp.op != CommOp::kAllToAll) s += ", " + std::to_string(fp.count);
    if (has_reduce(fp.op)) {
      s += ", ";
      s += reduce_op_name(fp.reduce);
    }
    if (fp.op == CommOp::kBroadcast) s += ", root " + std::to_string(fp.root);
    if (fp.op == CommOp::kSend || fp.op == CommOp::kRecv) s += ", peer " + std::to_string(fp.root);
    s += ")";
  }
  s += " #" + std::to_string(fp.seq);
  return s;
}

std::array<int64_t, kFingerprintWords> pack_fingerprint(const OpFingerprint& fp) {
  const int64_t head = int64_t(fp.op) | (int64_t(fp.dtype) << 8) | (int64_t(fp.reduce) << 16);
  return {head, fp.count, fp.root, int64_t(fp.seq)};
}

OpFingerprint unpack_fingerprint(std::span<const int64_t> w) {
  TP_CHECK(w.size() >= size_t(kFingerprintWords), "[unpack_fingerprint] got ", w.size(),
           " words, expected ", kFingerprintWords);
  OpFingerprint fp;
  fp.op = CommOp(w[0] & 0xff);
  fp.dtype = DType((w[0] >> 8) & 0xff);
  fp.reduce = ReduceOp((w[0] >> 16) & 0xff);
  fp.count = w[1];
  fp.root = w[2];
  fp.seq = uint64_t(w[3]);
  return fp;
}

void verify_fingerprints(std::span<const OpFingerprint> all, std::string_view where,
                         std::string_view group) {
  for (size_t r = 1; r < all.size(); ++r) {
    TP_CHECK(all[r] == all[0], "[", where, "] mismatched collectives on ", group, ": rank 0 called ",
             describe_fingerprint(all[0]), " but rank ", r, " called ", describe_fingerprint(all[r]));
  }
}

void check_fingerprints(const OpFingerprint& mine, int size, std::string_view group,
                        const FingerprintGather& gather) {
  const auto packed = pack_fingerprint(mine);
  std::vector<int64_t> words(static_cast<size_t>(size) * kFingerprintWords);
  gather(packed.data(), words.data());
  std::vector<OpFingerprint> all;
  all.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r)
    all.push_back(unpack_fingerprint(std::span<const int64_t>(words).subspan(
        static_cast<size_t>(r) * kFingerprintWords, kFingerprintWords)));
  verify_fingerprints(all, comm_op_name(mine.op), group);
}

}  // namespace tensorpar
