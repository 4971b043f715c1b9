// TENSORPAR_FAULT parsing and the fault-injecting Communicator decorator.
#include "comm/fault_injection.h"

#include <charconv>
#include <chrono>
#include <thread>
#include <vector>

#include "core/error.h"

namespace tensorpar {

namespace {

constexpr const char* kForm =
    "expected rank:R,op:OP,after:N,action:kill|stall|throw with OP one of all_reduce, "
    "all_gather, reduce_scatter, broadcast, all_to_all, send, recv, barrier, split, any";

constexpr CommOp kOps[] = {CommOp::kAllReduce, CommOp::kAllGather, CommOp::kReduceScatter,
                           CommOp::kBroadcast, CommOp::kAllToAll,  CommOp::kBarrier,
                           CommOp::kSplit,     CommOp::kSend,      CommOp::kRecv};

int64_t parse_count(std::string_view spec, std::string_view key, std::string_view v) {
  int64_t x = -1;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  TP_CHECK(!v.empty() && ec == std::errc() && end == v.data() + v.size() && x >= 0,
           "[TENSORPAR_FAULT] '", spec, "': ", key, ":", v, " is not a non-negative integer; ", kForm);
  return x;
}

}  // namespace

std::string_view fault_action_name(FaultAction a) {
  switch (a) {
    case FaultAction::kKill: return "kill";
    case FaultAction::kStall: return "stall";
    case FaultAction::kThrow: return "throw";
  }
  return "?";
}

FaultSpec parse_fault_spec(std::string_view spec) {
  FaultSpec out;
  out.text = std::string(spec);
  std::vector<std::string_view> seen;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string_view::npos) comma = spec.size();
    const std::string_view item = spec.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t colon = item.find(':');
    TP_CHECK(colon != std::string_view::npos, "[TENSORPAR_FAULT] '", spec, "': '", item,
             "' is not key:value; ", kForm);
    const std::string_view key = item.substr(0, colon), value = item.substr(colon + 1);
    for (std::string_view k : seen)
      TP_CHECK(k != key, "[TENSORPAR_FAULT] '", spec, "': ", key, " is given twice; ", kForm);
    seen.push_back(key);
    if (key == "rank") {
      const int64_t r = parse_count(spec, key, value);
      TP_CHECK(r <= 1 << 20, "[TENSORPAR_FAULT] '", spec, "': rank ", r, " is out of range");
      out.rank = int(r);
    } else if (key == "after") {
      out.after = parse_count(spec, key, value);
    } else if (key == "op") {
      bool known = value == "any";
      for (CommOp op : kOps)
        if (comm_op_name(op) == value) out.op = op, known = true;
      TP_CHECK(known, "[TENSORPAR_FAULT] '", spec, "': unknown op '", value, "'; ", kForm);
    } else if (key == "action") {
      if (value == "kill") out.action = FaultAction::kKill;
      else if (value == "stall") out.action = FaultAction::kStall;
      else if (value == "throw") out.action = FaultAction::kThrow;
      else TP_CHECK(false, "[TENSORPAR_FAULT] '", spec, "': unknown action '", value, "'; ", kForm);
    } else {
      TP_CHECK(false, "[TENSORPAR_FAULT] '", spec, "': unknown key '", key, "'; ", kForm);
    }
    if (comma == spec.size()) break;
  }
  TP_CHECK(seen.size() == 4, "[TENSORPAR_FAULT] '", spec,
           "': rank, op, after and action must all be given; ", kForm);
  return out;
}

FaultInjectingCommunicator::FaultInjectingCommunicator(Communicator& inner, FaultSpec spec,
                                                       FaultHooks hooks)
    : inner_(&inner), shared_(std::make_shared<Shared>()) {
  shared_->armed = inner.rank() == spec.rank;
  shared_->spec = std::move(spec);
  shared_->hooks = std::move(hooks);
}

FaultInjectingCommunicator::FaultInjectingCommunicator(std::unique_ptr<Communicator> owned,
                                                       std::shared_ptr<Shared> shared)
    : owned_(std::move(owned)), inner_(owned_.get()), shared_(std::move(shared)) {}

void FaultInjectingCommunicator::before(CommOp op) {
  Shared& s = *shared_;
  if (!s.armed || (s.spec.op && *s.spec.op != op)) return;
  const int64_t call = s.calls.fetch_add(1) + 1;
  if (call != s.spec.after + 1) return;
  const std::string what = detail::concat(
      "[fault] TENSORPAR_FAULT=", s.spec.text, ": rank ", s.spec.rank, " ",
      s.spec.action == FaultAction::kKill    ? "killed"
      : s.spec.action == FaultAction::kStall ? "stalled"
                                             : "threw",
      " at its ", comm_op_name(op), " call #", call, " on ", inner_->name());
  switch (s.spec.action) {
    case FaultAction::kKill:
      s.hooks.kill(what);
      std::abort();  // a kill hook that returned: a bug of the launcher
    case FaultAction::kStall:
      // Not inside any collective, as a rank stuck in its own code would be.
      while (!(s.hooks.released && s.hooks.released()))
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      throw Error(what + "; released after its peers gave up on it");
    case FaultAction::kThrow: throw Error(what);
  }
}

void FaultInjectingCommunicator::all_reduce(const void* in, void* out, int64_t count, DType dtype,
                                            ReduceOp op) {
  before(CommOp::kAllReduce);
  inner_->all_reduce(in, out, count, dtype, op);
}
void FaultInjectingCommunicator::all_gather(const void* in, void* out, int64_t count, DType dtype) {
  before(CommOp::kAllGather);
  inner_->all_gather(in, out, count, dtype);
}
void FaultInjectingCommunicator::reduce_scatter(const void* in, void* out, int64_t count,
                                                DType dtype, ReduceOp op) {
  before(CommOp::kReduceScatter);
  inner_->reduce_scatter(in, out, count, dtype, op);
}
void FaultInjectingCommunicator::broadcast(void* data, int64_t count, DType dtype, int root) {
  before(CommOp::kBroadcast);
  inner_->broadcast(data, count, dtype, root);
}
void FaultInjectingCommunicator::all_to_all(const void* in, std::span<const int64_t> send_counts,
                                            void* out, std::span<const int64_t> recv_counts,
                                            DType dtype) {
  before(CommOp::kAllToAll);
  inner_->all_to_all(in, send_counts, out, recv_counts, dtype);
}
void FaultInjectingCommunicator::send(const void* data, int64_t count, DType dtype, int peer) {
  before(CommOp::kSend);
  inner_->send(data, count, dtype, peer);
}
void FaultInjectingCommunicator::recv(void* data, int64_t count, DType dtype, int peer) {
  before(CommOp::kRecv);
  inner_->recv(data, count, dtype, peer);
}
void FaultInjectingCommunicator::barrier() {
  before(CommOp::kBarrier);
  inner_->barrier();
}
std::unique_ptr<Communicator> FaultInjectingCommunicator::split(int color, int key) {
  before(CommOp::kSplit);
  std::unique_ptr<Communicator> child = inner_->split(color, key);
  if (!child) return nullptr;
  return std::unique_ptr<Communicator>(new FaultInjectingCommunicator(std::move(child), shared_));
}

}  // namespace tensorpar
