// Alpha-beta times of collectives (ring algorithms, as NCCL and our threads backend run large
// messages): a step costs the link latency, the bytes move at the link bandwidth times its
// efficiency. `bytes` is the whole array, as nccl-tests counts it.
#pragma once

#include "plan/cluster.h"

namespace tensorpar::plan {

// A group of `size` ranks whose members are `stride` ranks apart in the world (rank order: TP
// fastest, then DP/EP, then PP). It crosses nodes when size x stride exceeds a node.
struct GroupShape {
  int size = 1;
  int stride = 1;
};
const LinkSpec& group_link(const ClusterSpec& c, GroupShape g);

double all_reduce_time(const ClusterSpec& c, GroupShape g, double bytes);
double all_gather_time(const ClusterSpec& c, GroupShape g, double bytes);  // = reduce-scatter
double all_to_all_time(const ClusterSpec& c, GroupShape g, double bytes);  // bytes sent per rank
double send_time(const LinkSpec& link, const ClusterSpec& c, double bytes);

}  // namespace tensorpar::plan
