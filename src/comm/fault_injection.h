// TENSORPAR_FAULT: a switch for tests that makes one rank fail at a chosen communication call,
// to show what the surviving ranks do. The spec is four comma-separated key:value pairs, e.g.
//   TENSORPAR_FAULT=rank:1,op:all_reduce,after:37,action:kill
// rank: the world rank that fails; op: all_reduce | all_gather | reduce_scatter | broadcast |
// all_to_all | send | recv | barrier | split | any; after: how many calls of that op the rank
// completes first (the fault fires at call after+1, counted over every group of the rank);
// action: kill (the rank dies), stall (it never enters the call) or throw (it raises an Error).
// FaultInjectingCommunicator carries it out in front of any backend; the launcher installs it
// (comm/launch.h) and says what "kill" and "stall" mean for its backend (FaultHooks).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "comm/communicator.h"
#include "comm/debug_fingerprint.h"

namespace tensorpar {

enum class FaultAction : uint8_t { kKill, kStall, kThrow };
std::string_view fault_action_name(FaultAction a);

struct FaultSpec {
  int rank = 0;
  std::optional<CommOp> op;  // nullopt: any op
  int64_t after = 0;
  FaultAction action = FaultAction::kThrow;
  std::string text;  // the spec as given, quoted in messages
};

// Parses a spec strictly: every key exactly once, nothing else. Throws Error naming the bad part
// and the expected form.
FaultSpec parse_fault_spec(std::string_view spec);

// How the launcher's backend carries out a kill and ends a stall.
struct FaultHooks {
  // Must not return: ends this rank (a process: SIGKILL; a thread: see comm/launch.cpp).
  std::function<void(const std::string& what)> kill;
  // Polled while stalled; the stall ends (with an Error) once it returns true. Null: never.
  std::function<bool()> released;
};

// Forwards every call to `inner`; on rank spec.rank the matching call number after+1 fails as
// the spec says instead of reaching the inner communicator. Groups from split() are wrapped too
// and share the call count, so the count is the rank's, whatever group a call is made on.
class FaultInjectingCommunicator final : public Communicator {
 public:
  FaultInjectingCommunicator(Communicator& inner, FaultSpec spec, FaultHooks hooks);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  void all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) override;
  void all_gather(const void* in, void* out, int64_t count, DType dtype) override;
  void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) override;
  void broadcast(void* data, int64_t count, DType dtype, int root) override;
  void all_to_all(const void* in, std::span<const int64_t> send_counts, void* out,
                  std::span<const int64_t> recv_counts, DType dtype) override;
  void send(const void* data, int64_t count, DType dtype, int peer) override;
  void recv(void* data, int64_t count, DType dtype, int peer) override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;

  using Communicator::all_reduce;
  using Communicator::broadcast;

 private:
  struct Shared {
    FaultSpec spec;
    FaultHooks hooks;
    bool armed = false;  // this is the failing rank
    std::atomic<int64_t> calls{0};
  };
  FaultInjectingCommunicator(std::unique_ptr<Communicator> owned, std::shared_ptr<Shared> shared);
  // Counts the call and fails it when it is the chosen one.
  void before(CommOp op);

  std::unique_ptr<Communicator> owned_;  // a split group's inner communicator
  Communicator* inner_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace tensorpar
