#!/usr/bin/env bash
# Faults across two simulated hosts (scripts/hosts.sh), 2 ranks each, training tp 2 x dp 2 with
# --backend hybrid and a checkpoint every 10 steps:
#   link: host 1's link is taken down (`hosts.sh link 1 down`) after step 15;
#   kill: host 1's tensorpar processes are SIGKILLed after step 15.
# Each time the job must end by itself with a non-zero status and an error naming what failed (the
# cut-off host or the ranks no longer answering; bounded by the comm timeout and the launcher's
# keepalive, checked against a generous limit derived from TENSORPAR_COMM_TIMEOUT), no process
# may be left in either host, `latest` must name a complete checkpoint, and the run resumed from
# it (link back up) must print the records of an uninterrupted run from that step on.
# Usage: two_hosts_faults.sh TENSORPAR_BINARY MPIEXEC. Exit 77 (skip) without network namespaces.
set -euo pipefail
bin="$1"
mpirun="$2"
root="$(cd "$(dirname "$0")/../.." && pwd)"
source "$root/tests/multihost/common.sh"
train_args+=(--steps 40 --tp 2 --dp 2 --save-every 10)
timeout_s="${TENSORPAR_COMM_TIMEOUT:-60}"
limit_s=$(( ${timeout_s%.*} * 3 + 60 ))  # the survivors' timeout and abort, or the launcher's ~11 s

"$bin" "${train_args[@]}" --backend threads >"$work/reference" 2>"$work/reference.err" ||
  { cat "$work/reference.err"; echo "FAILED: the uninterrupted run failed"; exit 1; }

left_in_hosts() { for h in 0 1; do ip netns pids "$name-h$h"; done | tr '\n' ' '; }

fail=0
for fault in link kill; do
  out="$work/$fault"
  rm -f "$out.rc"
  ( set +e; "$mpirun" "${placement[@]}" -x TENSORPAR_COMM_TIMEOUT -np 4 "$bin" "${train_args[@]}" \
      --backend hybrid --out "$work/ck_$fault" >"$out" 2>"$out.err"; echo $? >"$out.rc" ) &
  job=$!
  for ((i = 0; i < limit_s * 10; i++)); do  # step 15, or the job's end (bounded by the comm timeout)
    grep -q '"step":15,' "$out" 2>/dev/null && break
    [ -e "$out.rc" ] && break
    sleep 0.1
  done
  if [ -e "$out.rc" ]; then
    cat "$out.err"; echo "FAILED $fault: the job ended before the fault ($(cat "$out.rc"))"; fail=1; continue
  fi
  if [ "$fault" = link ]; then
    hosts link 1 down
  else
    for pid in $(ip netns pids "$name-h1"); do
      [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = tensorpar ] && kill -9 "$pid"
    done
  fi
  for ((i = 0; i < limit_s * 10; i++)); do [ -e "$out.rc" ] && break; sleep 0.1; done
  if [ ! -e "$out.rc" ]; then
    echo "FAILED $fault: the job did not end within ${limit_s} s of the fault (left: $(left_in_hosts))"
    kill -9 "$job" 2>/dev/null || true
    hosts link 1 up || true
    fail=1
    continue
  fi
  rc=$(cat "$out.rc")
  if [ "$rc" -eq 0 ]; then echo "FAILED $fault: the job exited 0"; fail=1; fi
  # OpenMPI's launcher names the cut-off host; the survivors name the ranks that do not answer;
  # on a kill, OpenMPI names the killed rank.
  if ! grep -Eq "lost communication with a remote daemon|no answer from world ranks|rank [23] .*(killed|signal 9)|exited on signal 9" "$out.err"; then
    echo "FAILED $fault: no error names what failed:"; cat "$out.err"; fail=1
  fi
  sleep 1
  left="$(left_in_hosts)"
  if [ -n "${left// /}" ]; then echo "FAILED $fault: processes left in the hosts: $left"; fail=1; fi
  [ "$fault" = link ] && hosts link 1 up
  latest="$(cat "$work/ck_$fault/latest" 2>/dev/null || true)"
  step="${latest#step-}"
  if ! [[ $step =~ ^[0-9]+$ ]] || [ "$step" -lt 10 ]; then
    echo "FAILED $fault: latest names '$latest' after step 15"; fail=1; continue
  fi
  # The checkpoint keeps the model and the run's settings; the layout is given again (any is allowed).
  "$mpirun" "${placement[@]}" -x TENSORPAR_COMM_TIMEOUT -np 4 "$bin" train --resume "$work/ck_$fault" --tp 2 --dp 2 \
    --backend hybrid --threads-per-rank 1 --json >"$out.resumed" 2>"$out.resumed.err" ||
    { cat "$out.resumed.err"; echo "FAILED $fault: the resumed run failed"; fail=1; continue; }
  if python3 "$root/tests/multihost/compare_records.py" "$fault: resumed at step $step" \
      <(losses "$work/reference") <(losses "$out.resumed") $((step + 1)); then
    echo "ok $fault: exit $rc, $(grep -Eo "lost communication with a remote daemon|no answer from world ranks [0-9, ]+|exited on signal 9" "$out.err" | head -n 1), nothing left in the hosts"
  else
    fail=1
  fi
done
exit "$fail"
