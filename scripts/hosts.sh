#!/usr/bin/env bash
# Simulated hosts on this machine, for multi-host runs (docs/multihost.md):
#
#   bash scripts/hosts.sh up N [--rate RATE] [--slots K] [--split-cores] [--name NAME]
#   bash scripts/hosts.sh down [--name NAME]
#   bash scripts/hosts.sh link HOST up|down [--name NAME]
#
# `up` makes N Linux network namespaces (NAME-h0 ... NAME-h{N-1}), each a "host" with its own
# address 10.77.S.(i+1)/24 on a veth pair to a bridge (NAME-br, 10.77.S.254) in this namespace,
# where S comes from NAME. --rate (e.g. 10gbit, 1gbit, 100mbit) limits each host's link in both
# directions with tc's token bucket (tbf); this kernel has no netem, so a link's latency is the
# veth's own (tens of microseconds), not a WAN's. It writes a hostfile (K slots per host; default
# the cores of this machine, which all hosts share; with --split-cores host i runs only on the
# cores c with c mod N = i, as if it had its own, and K defaults to their number) and an rsh agent
# that starts a command inside a host's namespace (with that host's own hostname and cores), and
# prints, as its last line, the mpirun
# arguments that place ranks on those hosts over OpenMPI's tcp transport (shared memory inside a
# host), so that
#
#   mpirun $(bash scripts/hosts.sh up 2 | tail -n 1) -np 4 build/bin/tensorpar ... --backend hybrid
#
# runs 2 ranks on each of 2 hosts. Traffic stays on the hosts' addresses and loopback. `link`
# takes a host's link down or up (a cable pulled), `down` removes everything `up` made (and ends
# any process left in the hosts). Root only; where namespaces cannot be made, `up` exits 3 with
# the reason (the tests then skip).
set -euo pipefail

die() { echo "hosts.sh: $*" >&2; exit "${2:-1}"; }
usage() { sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
name=tp rate="" slots="" split=0 n=0 host="" state=""
case "$cmd" in
  up) [ $# -ge 1 ] || usage; n=$1; shift ;;
  link) [ $# -ge 2 ] || usage; host=$1 state=$2; shift 2 ;;
  down) ;;
  *) usage ;;
esac
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --slots) slots=$2; shift 2 ;;
    --split-cores) split=1; shift ;;
    --name) name=$2; shift 2 ;;
    *) usage ;;
  esac
done
[[ $name =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--name '$name': expected a lowercase letter then up to 7 letters or digits"
dir=${TMPDIR:-/tmp}/tensorpar-hosts-$name
octet=$(( $(printf '%s' "$name" | cksum | cut -d' ' -f1) % 250 + 1 ))
subnet=10.77.$octet
bridge=$name-br

down() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name-h[0-9]+$" || true); do
    # Processes left inside the host (an interrupted run) go with it.
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
    ip netns del "$ns"
  done
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$dir"
}

[ "$(id -u)" = 0 ] || die "needs root (network namespaces); run as root" 3
command -v ip >/dev/null || die "the ip command (iproute2) is missing: scripts/setup.sh installs it" 3

case "$cmd" in
  down) down; exit 0 ;;
  link)
    [ -f "$dir/map" ] || die "no hosts named $name are up"
    [[ $host =~ ^[0-9]+$ ]] || die "link: host '$host' is not a host index"
    [ "$state" = up ] || [ "$state" = down ] || die "link: expected up or down, got '$state'"
    ip link set "$name-v$host" "$state"
    if [ "$state" = up ]; then
      # Usable once both ends report it up (the kernel applies a carrier change up to a second
      # later, dropping packets meanwhile: a connect right after `link up` could fail) and the
      # hosts have forgotten the neighbours they could not reach while it was down. Bounded: 10 s.
      ns=$name-h$host
      for ((i = 0; i < 100; i++)); do
        [ "$(cat "/sys/class/net/$name-v$host/operstate" 2>/dev/null)" = up ] &&
          [ "$(ip netns exec "$ns" cat /sys/class/net/eth0/operstate 2>/dev/null)" = up ] && break
        sleep 0.1
      done
      for h in $(awk '{print $2}' "$dir/map"); do ip -n "$h" neigh flush all 2>/dev/null || true; done
    fi
    exit 0 ;;
esac

[[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 16 ] || die "up: N must be 1..16, got '$n'"
cores=$(nproc)
[ "$split" = 0 ] || [ "$cores" -ge "$n" ] || die "--split-cores: $n hosts need at least $n cores, this machine has $cores"
[ -n "$slots" ] || slots=$(( split ? cores / n : cores ))
[[ $slots =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die "--slots: expected a positive count, got '$slots'"
if [ -n "$rate" ]; then
  [[ $rate =~ ^([0-9]+)(k|m|g)?bit$ ]] || die "--rate '$rate': expected e.g. 10gbit, 1gbit, 100mbit"
  case "${BASH_REMATCH[2]}" in k) mult=1000 ;; m) mult=1000000 ;; g) mult=1000000000 ;; *) mult=1 ;; esac
  bits=$(( BASH_REMATCH[1] * mult ))
  # tbf needs a bucket of at least rate / HZ (HZ up to 1000; 250 on most kernels): 4 ms of traffic.
  burst=$(( bits / 8 / 250 ))
  [ "$burst" -ge 65536 ] || burst=65536
fi
ip route show 2>/dev/null | grep -v "dev $bridge" | grep -q "^$subnet\." &&
  die "the subnet $subnet.0/24 is already routed here; pick another --name"

down
if ! ip netns add "$name-probe" 2>/dev/null; then
  die "cannot create network namespaces here (ip netns add failed: no CAP_SYS_ADMIN, or a container without them)" 3
fi
ip netns del "$name-probe"
mkdir -p "$dir"
ip link add "$bridge" type bridge
ip addr add "$subnet.254/24" dev "$bridge"
ip link set "$bridge" up
: >"$dir/map"
: >"$dir/hostfile"
for ((i = 0; i < n; i++)); do
  ns=$name-h$i veth=$name-v$i addr=$subnet.$((i + 1))
  ip netns add "$ns"
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  ip link set "$veth" master "$bridge" up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  if [ -n "$rate" ]; then
    tc qdisc add dev "$veth" root tbf rate "$rate" burst "$burst" latency 100ms
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 100ms
  fi
  cpus=""
  if [ "$split" = 1 ]; then cpus=$(seq "$i" "$n" $((cores - 1)) | paste -sd, -); fi
  echo "$addr $ns $cpus" >>"$dir/map"
  echo "$addr slots=$slots" >>"$dir/hostfile"
done

# OpenMPI's launcher calls the agent as `agent [options] HOST COMMAND...` for each host's daemon.
cat >"$dir/agent.sh" <<EOF
#!/bin/sh
# rsh agent for the hosts of scripts/hosts.sh (name $name): runs COMMAND inside HOST's namespace.
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
ns=\$(awk -v h="\$host" '\$1 == h { print \$2 }' "$dir/map")
cpus=\$(awk -v h="\$host" '\$1 == h { print \$3 }' "$dir/map")
[ -n "\$ns" ] || { echo "hosts.sh agent: unknown host '\$host' (not in $dir/map)" >&2; exit 1; }
if [ -n "\$cpus" ]; then
  exec ip netns exec "\$ns" taskset -c "\$cpus" unshare --uts sh -c "hostname \$ns; \$*"
fi
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$ns; \$*"
EOF
chmod +x "$dir/agent.sh"
echo "$n hosts up: $(awk '{print $2 "=" $1 ($3 == "" ? "" : " (cores " $3 ")")}' "$dir/map" | tr '\n' ' ')(bridge $bridge ${subnet}.254${rate:+, links limited to $rate}, $slots slots each)"
# The launcher's own links (mpirun to each host's daemon) probe an idle peer after 5 s and give
# up after 3 unanswered probes 2 s apart, so a host cut off ends the job in about 11 s instead of
# OpenMPI's default 8 minutes.
echo "--hostfile $dir/hostfile --mca plm_rsh_agent $dir/agent.sh --mca btl tcp,vader,self --mca btl_tcp_if_include $subnet.0/24 --mca oob_tcp_if_include $subnet.0/24 --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 --bind-to none --allow-run-as-root"
