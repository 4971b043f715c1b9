// Ring collectives in the alpha-beta model; the slowest link a group crosses sets the pace.
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
}  // namespace

double all_reduce_time(const ClusterSpec& c, GroupShape g, double bytes) {
  if (g.size <= 1 || bytes <= 0) return 0;
  const LinkSpec& l = group_link(c, g);
  const double n = g.size;
  return 2 * (n - 1) * l.latency_s + 2 * (n - 1) / n * bytes * beta(c, l);
}

double all_gather_time(const ClusterSpec& c, GroupShape g, double bytes) {
  if (g.size <= 1 || bytes <= 0) return 0;
  const LinkSpec& l = group_link(c, g);
  const double n = g.size;
  return (n - 1) * l.latency_s + (n - 1) / n * bytes * beta(c, l);
}

double all_to_all_time(const ClusterSpec& c, GroupShape g, double bytes) {
  return all_gather_time(c, g, bytes);
}

double send_time(const LinkSpec& link, const ClusterSpec& c, double bytes) {
  if (bytes <= 0) return 0;
  return link.latency_s + bytes * beta(c, link);
}

}  // namespace tensorpar::plan
