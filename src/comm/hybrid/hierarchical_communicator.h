// A group of ranks on several hosts, seen as one Communicator: the collectives that move the
// most data go in two levels, the ranks of a host among themselves (shared memory: the local
// group) and the hosts between them (the network: the cross group, one rank of each host per
// local index), so that each byte crosses the network once per host instead of once per rank.
//
//   all_reduce     = local reduce_scatter; across the hosts, the shard's reduce_scatter (an
//                    all_to_all of its H pieces, each host reducing its own) and all_gather;
//                    local all_gather
//   reduce_scatter = local reduce_scatter (of each local index's chunks), the same cross
//                    reduce_scatter
//   all_gather     = cross all_gather, local all_gather
//   broadcast      = cross broadcast among the root's local index, local broadcast
//
// all_to_all, send/recv, barrier and all-reduces under kTwoLevelMinBytes (latency-bound: one
// flat call beats four) go through the flat group. Ranks are numbered host-major
// (rank = host index * ranks per host + local index, hosts in the order of their lowest old
// rank), so consecutive ranks, and with them the tensor-parallel groups of a DeviceMesh, share
// a host whatever the launcher's placement. 16-bit floats are reduced in f32 and rounded once,
// as the flat backends do; every rank ends bitwise identical (the shards are reduced once, then
// copied). See docs/multihost.md.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace tensorpar {

// The group `group` (any backend) with each rank's host named by host_id (equal ids = one host),
// arranged in two levels when it spans several hosts with the same number of ranks (> 1) on each.
// Otherwise (one host, one rank per host, or uneven hosts) the flat group, renumbered host-major.
// Collective over `group`.
std::unique_ptr<Communicator> make_hierarchical(std::unique_ptr<Communicator> group, int64_t host_id);

class HierarchicalCommunicator final : public Communicator {
 public:
  // All-reduces of fewer bytes take the flat group (measured on simulated hosts: docs/multihost.md).
  static constexpr int64_t kTwoLevelMinBytes = 64 << 10;

  // flat: the whole group, host-major; local: this rank's host; cross: this local index's ranks,
  // one per host. Requires flat.rank() == cross.rank() * local.size() + local.rank().
  HierarchicalCommunicator(std::unique_ptr<Communicator> flat, std::unique_ptr<Communicator> local,
                           std::unique_ptr<Communicator> cross, int64_t host_id);

  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }
  std::string name() const override;
  int hosts() const { return cross_->size(); }
  int ranks_per_host() const { return local_->size(); }

  void all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) override;
  void all_gather(const void* in, void* out, int64_t count, DType dtype) override;
  void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) override;
  void broadcast(void* data, int64_t count, DType dtype, int root) override;
  void all_to_all(const void* in, std::span<const int64_t> send_counts, void* out,
                  std::span<const int64_t> recv_counts, DType dtype) override;
  void send(const void* data, int64_t count, DType dtype, int peer) override;
  void recv(void* data, int64_t count, DType dtype, int peer) override;
  void barrier() override;
  // The flat group's split, arranged in two levels again where it spans hosts evenly.
  std::unique_ptr<Communicator> split(int color, int key) override;

  using Communicator::all_reduce;
  using Communicator::broadcast;

 private:
  // out (count elements) = this host's chunk of in (H chunks of count, one per host) reduced
  // over the hosts, in host order. wt: the work type.
  void reduce_scatter_across(void* in, void* out, int64_t count, DType wt, ReduceOp op);

  std::unique_ptr<Communicator> flat_, local_, cross_;
  int64_t host_id_;
  std::vector<uint8_t> work_, gathered_, received_;  // staging (f32 for 16-bit floats)
};

}  // namespace tensorpar
