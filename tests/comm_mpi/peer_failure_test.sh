#!/usr/bin/env bash
# A rank leaves an MPI job mid-run; checks both what the survivors say and how every process
# ends. ctest alone can check a regex or an exit status, not both, hence this script.
#   exit:  rank 1 exits (status 3) under mpirun --enable-recovery, so the survivors live on and
#          reach their own timeout. Open MPI's mpirun then reports 0 whatever its ranks did, so
#          each rank runs under this script's --record mode, which keeps its exit status.
#          Expected: rank 1 ends with 3, ranks 0 and 2 with 1 (our MPI_Abort after the error; a
#          survivor whose status is lost because the other's abort killed the job first must
#          have printed its own abort line), and each survivor printed the timeout error naming
#          the op, the group and its rank.
#   stall: rank 1 stalls under plain mpirun. Expected: a survivor printed the timeout error and
#          aborted the job, and mpirun exits with that abort's status, 1.
# Usage: peer_failure_test.sh exit|stall TEST_BINARY MPIEXEC [MPIEXEC_FLAGS...]
# TENSORPAR_COMM_TIMEOUT (seconds) must be set: the survivors' timeout, named in their errors.
set -uo pipefail

if [[ "${1:-}" == --record ]]; then  # one rank: run the command, keep its exit status
  dir="$2"; shift 2
  "$@"
  rc=$?
  echo "$rc" > "$dir/rank${OMPI_COMM_WORLD_RANK:?not started by Open MPI mpirun}.status"
  exit "$rc"
fi

mode="$1" bin="$2"
shift 2
timeout_s="${TENSORPAR_COMM_TIMEOUT:?set TENSORPAR_COMM_TIMEOUT}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail=0
expect() {  # description, condition...
  local what="$1"; shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fail=1; fi
}
said() { grep -Eq -- "$1" "$work/out"; }
survivor_error() {  # rank -> the regex of that survivor's message
  echo "survivor rank $1 caught: \[mpi all_reduce\] timed out after ${timeout_s} s \(group mpi:world, rank $1 of 3, op #2 all_reduce\)"
}

case "$mode" in
  exit)
    "$@" --enable-recovery -np 3 bash "$0" --record "$work" "$bin" \
      --gtest_also_run_disabled_tests --gtest_filter=MpiFailure.DISABLED_PeerExit >"$work/out" 2>&1
    echo "mpirun exited with $? (not checked: --enable-recovery makes it 0)"
    cat "$work/out"
    status() { cat "$work/rank$1.status" 2>/dev/null || echo missing; }
    expect "rank 1 (the one that left) exited with 3: got $(status 1)" [ "$(status 1)" = 3 ]
    for r in 0 2; do
      # Its abort ends it with 1, unless the other survivor's abort tore the job down first (Open
      # MPI then kills this rank's --record wrapper too, so no status is kept): then it must at
      # least have reached its own abort and said so.
      if [ "$(status "$r")" = missing ]; then
        expect "survivor rank $r reached its abort (status lost to the other survivor's abort)" \
          said "tensorpar: aborting the MPI job from world rank $r"
      else
        expect "survivor rank $r exited with 1 (its abort): got $(status "$r")" [ "$(status "$r")" = 1 ]
      fi
      expect "survivor rank $r reported the timeout of op #2" said "$(survivor_error "$r")"
    done
    ;;
  stall)
    "$@" -np 3 "$bin" --gtest_also_run_disabled_tests --gtest_filter=MpiFailure.DISABLED_PeerStall \
      >"$work/out" 2>&1
    rc=$?
    cat "$work/out"
    expect "mpirun exited with 1 (a survivor's MPI_Abort): got $rc" [ "$rc" = 1 ]
    expect "a survivor reported the timeout of op #2" said "$(survivor_error '[02]')"
    expect "a survivor aborted the job" said "tensorpar: aborting the MPI job from world rank [02]"
    ;;
  *) echo "usage: $0 exit|stall TEST_BINARY MPIEXEC [MPIEXEC_FLAGS...]"; exit 2 ;;
esac
[[ $fail == 0 ]] && echo "peer_failure_test $mode: passed" || echo "peer_failure_test $mode: FAILED"
exit "$fail"
