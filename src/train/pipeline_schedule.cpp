// 1F1B schedule and layer split (see pipeline_schedule.h).
#include "train/pipeline_schedule.h"

#include <algorithm>

#include "core/error.h"

namespace tensorpar {

std::string pipe_step_name(const PipeStep& s) {
  static const char* const kNames[] = {"recvF", "F", "sendF", "recvB", "B", "sendB"};
  return kNames[size_t(s.op)] + std::to_string(s.micro);
}

std::vector<PipeStep> one_f_one_b_schedule(int stage, int n_stages, int64_t n_micro) {
  TP_CHECK(n_stages >= 1 && stage >= 0 && stage < n_stages && n_micro >= 1, "[one_f_one_b_schedule] stage ", stage,
           " of ", n_stages, " with ", n_micro, " micro-batches: expected 0 <= stage < stages and micro-batches >= 1");
  const bool first = stage == 0, last = stage == n_stages - 1, sends_first = stage % 2 == 0;
  std::vector<PipeStep> out;
  auto add = [&](PipeOp op, int64_t m) { out.push_back({op, m}); };
  // One send and one receive on the same link, in the order both ends agree on.
  auto exchange = [&](PipeStep send, PipeStep recv) {
    out.push_back(sends_first ? send : recv);
    out.push_back(sends_first ? recv : send);
  };
  const int64_t warmup = std::min<int64_t>(n_stages - stage - 1, n_micro), steady = n_micro - warmup;
  for (int64_t m = 0; m < warmup; ++m) {
    if (!first) add(PipeOp::kRecvForward, m);
    add(PipeOp::kForward, m);
    if (!last) add(PipeOp::kSendForward, m);
  }
  if (steady > 0 && !first) add(PipeOp::kRecvForward, warmup);
  for (int64_t i = 0; i < steady; ++i) {
    const int64_t fm = warmup + i, bm = i;
    add(PipeOp::kForward, fm);
    if (!last) exchange({PipeOp::kSendForward, fm}, {PipeOp::kRecvBackward, bm});
    add(PipeOp::kBackward, bm);
    if (first) continue;
    if (i == steady - 1)
      add(PipeOp::kSendBackward, bm);
    else
      exchange({PipeOp::kSendBackward, bm}, {PipeOp::kRecvForward, fm + 1});
  }
  for (int64_t m = steady; m < n_micro; ++m) {
    if (!last) add(PipeOp::kRecvBackward, m);
    add(PipeOp::kBackward, m);
    if (!first) add(PipeOp::kSendBackward, m);
  }
  return out;
}

std::vector<PipeStep> forward_only_schedule(int stage, int n_stages, int64_t n_micro) {
  TP_CHECK(n_stages >= 1 && stage >= 0 && stage < n_stages && n_micro >= 0, "[forward_only_schedule] stage ", stage,
           " of ", n_stages, " with ", n_micro, " micro-batches");
  std::vector<PipeStep> out;
  for (int64_t m = 0; m < n_micro; ++m) {
    if (stage > 0) out.push_back({PipeOp::kRecvForward, m});
    out.push_back({PipeOp::kForward, m});
    if (stage < n_stages - 1) out.push_back({PipeOp::kSendForward, m});
  }
  return out;
}

}  // namespace tensorpar
