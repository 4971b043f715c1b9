#!/usr/bin/env bash
# Training across two simulated hosts (scripts/hosts.sh) with two ranks each, --backend hybrid,
# against the same run in one process (threads): every step's loss, gradient norm, learning rate
# and validation loss, at tp 2 x dp 2 (TP inside the hosts, DP across), tp 2 x pp 2 (pipeline
# stages on different hosts) and tp 4 (TP across the hosts: its all-reduces in two levels).
# Records are compared as printed by --json (shortest round-trip form) within a relative 1e-5
# (a two-level sum of four partial results may round differently from a one-level one); the
# script also says which layouts agree bit for bit. The world must be the two-level one
# ("world hybrid[2 hosts x 2]" on stderr), and a run from another --init-seed must differ.
# Usage: two_hosts_losses.sh TENSORPAR_BINARY MPIEXEC. Exit 77 (skip) without network namespaces.
set -euo pipefail
bin="$1"
mpirun="$2"
root="$(cd "$(dirname "$0")/../.." && pwd)"
source "$root/tests/multihost/common.sh"
train_args+=(--steps 5)

fail=0
for layout in "2 2 1" "2 1 2" "4 1 1"; do  # tp dp pp
  read -r tp dp pp <<<"$layout"
  run="tp${tp}_dp${dp}_pp${pp}"
  "$bin" "${train_args[@]}" --tp "$tp" --dp "$dp" --pp "$pp" --backend threads \
    >"$work/threads_$run" 2>"$work/threads_$run.err" ||
    { cat "$work/threads_$run.err"; echo "FAILED $run: the threads run exited with $?"; exit 1; }
  "$mpirun" "${placement[@]}" -x TENSORPAR_COMM_TIMEOUT -np 4 "$bin" "${train_args[@]}" --tp "$tp" \
    --dp "$dp" --pp "$pp" --backend hybrid >"$work/hosts_$run" 2>"$work/hosts_$run.err" ||
    { cat "$work/hosts_$run.err"; echo "FAILED $run: the run on two hosts exited with $?"; exit 1; }
  if ! grep -q "world hybrid\[2 hosts x 2\]" "$work/hosts_$run.err"; then
    echo "FAILED $run: the world was not two hosts of two ranks:"; cat "$work/hosts_$run.err"; fail=1
  fi
  if python3 "$root/tests/multihost/compare_records.py" "$run" <(losses "$work/threads_$run") \
      <(losses "$work/hosts_$run"); then :; else fail=1; fi
done

"$bin" "${train_args[@]}" --tp 2 --dp 2 --backend threads --init-seed 12345 >"$work/other_seed" 2>/dev/null
if python3 "$root/tests/multihost/compare_records.py" other-seed <(losses "$work/threads_tp2_dp2_pp1") \
    <(losses "$work/other_seed") >/dev/null; then
  echo "FAILED: a run from another --init-seed agreed"; fail=1
else
  echo "ok: a run from another --init-seed differs"
fi
exit "$fail"
