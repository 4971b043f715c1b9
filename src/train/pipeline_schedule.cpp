// 1F1B schedule and layer split (see pipeline_schedule.h).
#include "train/pipeline_schedule.h"

#include <algorithm>

#include "core/error.h"

namespace tensorpar {

std::string pipe_step_name(const PipeStep& s) {
  static const char* const kNames[] = {"recvF", "F", "sendF", "recvB", "B", "sendB"};
  std::string out = kNames[size_t(s.op)];
  out += std::to_string(s.micro);
  if (s.chunk > 0) out.append(1, 'c').append(std::to_string(s.chunk));
  return out;
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
  return interleaved_forward_only_schedule(stage, n_stages, 1, n_micro);
}

namespace {

void check_interleaved(const char* where, int stage, int n_stages, int n_chunks, int64_t n_micro) {
  TP_CHECK(n_stages >= 1 && stage >= 0 && stage < n_stages && n_chunks >= 1 && n_micro >= 0, "[", where, "] stage ",
           stage, " of ", n_stages, " with ", n_chunks, " chunks and ", n_micro,
           " micro-batches: expected 0 <= stage < stages and chunks >= 1");
}

// The (chunk, micro-batch) pairs in the order every stage runs their forwards (or backwards):
// groups of n_stages micro-batches, each through the chunks in turn.
std::vector<std::pair<int, int64_t>> virtual_order(int n_stages, int n_chunks, int64_t n_micro, bool backward) {
  std::vector<std::pair<int, int64_t>> out;
  for (int64_t g = 0; g < n_micro; g += n_stages)
    for (int i = 0; i < n_chunks; ++i)
      for (int64_t m = g; m < std::min<int64_t>(g + n_stages, n_micro); ++m)
        out.emplace_back(backward ? n_chunks - 1 - i : i, m);
  return out;
}

// Appends a compute step with the receive it needs before it and the send after it.
void add_with_transfers(std::vector<PipeStep>& out, bool forward, int chunk, int64_t m, bool has_prev,
                        bool has_next) {
  if (forward) {
    if (has_prev) out.push_back({PipeOp::kRecvForward, m, chunk});
    out.push_back({PipeOp::kForward, m, chunk});
    if (has_next) out.push_back({PipeOp::kSendForward, m, chunk});
  } else {
    if (has_next) out.push_back({PipeOp::kRecvBackward, m, chunk});
    out.push_back({PipeOp::kBackward, m, chunk});
    if (has_prev) out.push_back({PipeOp::kSendBackward, m, chunk});
  }
}

}  // namespace

int interleaved_prev_stage(int stage, int n_stages, int chunk, int /*n_chunks*/) {
  if (stage > 0) return stage - 1;
  return chunk > 0 ? n_stages - 1 : -1;
}

int interleaved_next_stage(int stage, int n_stages, int chunk, int n_chunks) {
  if (stage < n_stages - 1) return stage + 1;
  return chunk < n_chunks - 1 ? 0 : -1;
}

std::vector<PipeStep> interleaved_schedule(int stage, int n_stages, int n_chunks, int64_t n_micro) {
  check_interleaved("interleaved_schedule", stage, n_stages, n_chunks, n_micro);
  TP_CHECK(n_micro >= 1, "[interleaved_schedule] ", n_micro, " micro-batches, expected >= 1");
  if (n_chunks == 1) return one_f_one_b_schedule(stage, n_stages, n_micro);
  TP_CHECK(n_micro % n_stages == 0, "[interleaved_schedule] ", n_micro, " micro-batches over ", n_stages,
           " stages of ", n_chunks, " chunks: the interleaved schedule needs a multiple of the stages (a last group of "
           "fewer micro-batches than stages leaves a larger bubble than 1F1B and can deadlock)");
  const auto fwd = virtual_order(n_stages, n_chunks, n_micro, false);
  const auto bwd = virtual_order(n_stages, n_chunks, n_micro, true);
  const int64_t total = int64_t(fwd.size());
  const int64_t warmup = std::min<int64_t>(total, 2 * int64_t(n_stages - stage - 1) + int64_t(n_chunks - 1) * n_stages);
  std::vector<PipeStep> out;
  auto add = [&](bool forward, const std::pair<int, int64_t>& cm) {
    const auto [chunk, m] = cm;
    add_with_transfers(out, forward, chunk, m, interleaved_prev_stage(stage, n_stages, chunk, n_chunks) >= 0,
                       interleaved_next_stage(stage, n_stages, chunk, n_chunks) >= 0);
  };
  for (int64_t k = 0; k < warmup; ++k) add(true, fwd[size_t(k)]);
  for (int64_t k = warmup; k < total; ++k) {
    add(true, fwd[size_t(k)]);
    add(false, bwd[size_t(k - warmup)]);
  }
  for (int64_t k = total - warmup; k < total; ++k) add(false, bwd[size_t(k)]);
  return out;
}

std::vector<PipeStep> interleaved_forward_only_schedule(int stage, int n_stages, int n_chunks, int64_t n_micro) {
  check_interleaved("interleaved_forward_only_schedule", stage, n_stages, n_chunks, n_micro);
  std::vector<PipeStep> out;
  for (const auto& [chunk, m] : virtual_order(n_stages, n_chunks, n_micro, false))
    add_with_transfers(out, true, chunk, m, interleaved_prev_stage(stage, n_stages, chunk, n_chunks) >= 0,
                       interleaved_next_stage(stage, n_stages, chunk, n_chunks) >= 0);
  return out;
}

}  // namespace tensorpar
