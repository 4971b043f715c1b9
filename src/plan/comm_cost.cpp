// Ring collectives in the alpha-beta model. A group inside a node runs at the node's link; one
// with a member per node at the network's; one with several members on each of several nodes in
// two levels, as NCCL and tensorpar's hybrid backend run it: inside each node, then a ring per
// local index across the nodes on 1/L of the bytes each (L members per node).
#include "plan/comm_cost.h"

namespace tensorpar::plan {

const LinkSpec& group_link(const ClusterSpec& c, GroupShape g) {
  const long span = long(g.size) * long(g.stride);
  return span > c.devices_per_node ? c.inter : c.intra;
}

namespace {
double beta(const ClusterSpec& c, const LinkSpec& l) {
  return 1.0 / (l.bandwidth_Bps * c.eff.link);
}

double ring_all_reduce(const ClusterSpec& c, const LinkSpec& l, double n, double bytes) {
  return n <= 1 ? 0 : 2 * (n - 1) * l.latency_s + 2 * (n - 1) / n * bytes * beta(c, l);
}

double ring_all_gather(const ClusterSpec& c, const LinkSpec& l, double n, double bytes) {
  return n <= 1 ? 0 : (n - 1) * l.latency_s + (n - 1) / n * bytes * beta(c, l);
}

// Members of g on each node when g spans several nodes with more than one member on each, evenly;
// 1 otherwise (then one level: a node's link, or the network's for the whole ring).
int members_per_node(const ClusterSpec& c, GroupShape g) {
  if (long(g.size) * g.stride <= c.devices_per_node || g.stride >= c.devices_per_node) return 1;
  if (c.devices_per_node % g.stride != 0) return 1;
  const int per_node = c.devices_per_node / g.stride;
  return per_node > 1 && g.size % per_node == 0 ? per_node : 1;
}

}  // namespace

double all_reduce_time(const ClusterSpec& c, GroupShape g, double bytes) {
  if (g.size <= 1 || bytes <= 0) return 0;
  const int L = members_per_node(c, g);
  if (L == 1) return ring_all_reduce(c, group_link(c, g), g.size, bytes);
  // reduce-scatter and all-gather inside the node, an all-reduce of 1/L of the bytes across.
  return 2 * ring_all_gather(c, c.intra, L, bytes) + ring_all_reduce(c, c.inter, g.size / L, bytes / L);
}

double all_gather_time(const ClusterSpec& c, GroupShape g, double bytes) {
  if (g.size <= 1 || bytes <= 0) return 0;
  const int L = members_per_node(c, g);
  if (L == 1) return ring_all_gather(c, group_link(c, g), g.size, bytes);
  return ring_all_gather(c, c.inter, g.size / L, bytes / L) + ring_all_gather(c, c.intra, L, bytes);
}

double all_to_all_time(const ClusterSpec& c, GroupShape g, double bytes) {
  return all_gather_time(c, g, bytes);
}

double send_time(const LinkSpec& link, const ClusterSpec& c, double bytes) {
  if (bytes <= 0) return 0;
  return link.latency_s + bytes * beta(c, link);
}

}  // namespace tensorpar::plan
