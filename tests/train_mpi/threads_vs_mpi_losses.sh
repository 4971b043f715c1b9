#!/usr/bin/env bash
# The README's claim: `tensorpar train` gives the same losses bit for bit with threads in one
# process and under mpirun --backend mpi. Trains a tiny Llama for a few steps both ways, at tp 2,
# dp 2, tp 2 x dp 2, and with pipeline stages (pp 2, tp 2 x pp 2, pp 2 x dp 2: activations and
# their gradients sent between processes), dp 2 and pp 2 x dp 2 with the distributed optimizer
# (--zero 1: reduce-scatter and all-gather between processes), tp 2 x pp 2 and tp 2 x dp 2 with
# sequence parallelism (rows all-gathered and reduce-scattered, each TP rank's rows sent between
# stages), data-parallel gradients in many small buckets reduced on a communication thread while
# backward goes on (--dp-bucket-mb, with and without --zero 1; the other layouts use the default,
# one bucket for this model) and without buckets, the interleaved pipeline schedule (--pp-virtual 2:
# the last stage sends to the first, activations and gradients both ways on one link; pp 2 and
# tp 2 x dp 2 x pp 2 with ZeRO-1 in buckets, 8 processes), and compares every step's loss, gradient norm,
# learning rate and validation loss as printed by --json (shortest round-trip form, so equal text
# is equal bits); only the timing fields are dropped. A run from another --init-seed must differ, so the comparison can fail.
# Usage: threads_vs_mpi_losses.sh TENSORPAR_BINARY MPIEXEC [MPIEXEC_FLAGS...]
set -euo pipefail
bin="$1"
shift
mpirun=("$@")
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# A deterministic corpus of a few thousand tokens.
for i in $(seq 1 300); do
  echo "Line $i: the quick brown fox jumps over $((i * 7 % 13)) lazy dogs; def f(x): return x + $i"
done >"$work/corpus.txt"

# One compute thread per rank on both sides: the same matmul kernels and blocking.
train_args=(train --arch llama --hidden 64 --heads 4 --kv-heads 2 --ffn 128 --seq 32
  --vocab-from "$root/tests/fixtures/tokenizer/gpt2_trained.tokenizer.json" --data "$work/corpus.txt"
  --batch 4 --steps 5 --lr 3e-3 --warmup 1 --eval-every 2 --threads-per-rank 1 --json)

# The step records without their timing fields.
losses() {
  sed -E 's/"(tokens_per_s|ms_per_step|compute_s|activation_bytes)":[^,}]*,?//g; s/"(comm_s|dp_reduce)":\{[^}]*\},?//g; s/,}/}/g' "$1"
}

fail=0
compare() {  # name, threads output, mpi output
  local n
  n="$(losses "$2" | grep -c '"loss"' || true)"
  if [[ "$n" -ne 5 ]]; then
    echo "FAILED $1: expected 5 step records from threads, got $n"; cat "$2"; fail=1; return
  fi
  if diff <(losses "$2") <(losses "$3") >"$work/diff"; then
    echo "ok $1: threads and mpi agree on all 5 steps; last: $(losses "$2" | tail -n 1)"
  else
    echo "FAILED $1: threads (<) and mpi (>) differ:"; cat "$work/diff"; fail=1
  fi
}

for layout in "2 1 1 0 0" "1 2 1 0 0" "2 2 1 0 0" "1 1 2 0 0" "2 1 2 0 0" "1 2 2 0 0" "1 2 1 1 0" "1 2 2 1 0" \
  "2 1 2 0 1" "2 2 1 1 1" "1 2 2 0 0 0.004" "1 2 2 1 0 0.004" "1 2 1 0 0 0" "1 1 2 0 0 4 2" "2 2 2 1 0 0.004 2"; do
  # tp dp pp zero sequence-parallel [dp-bucket-mb [pp-virtual]]
  read -r tp dp pp zero sp bucket virtual <<<"$layout"
  name="tp${tp}_dp${dp}_pp${pp}_zero${zero}_sp${sp}${bucket:+_bucket$bucket}${virtual:+_virtual$virtual}"
  sp_flag=(--layers 2)
  [[ "$sp" == 1 ]] && sp_flag+=(--sequence-parallel)
  [[ -n "$bucket" ]] && sp_flag+=(--dp-bucket-mb "$bucket")
  # Interleaved: 4 layers, one per virtual stage; 1 sequence per micro-batch, so each DP rank runs
  # a multiple of the stages.
  [[ -n "$virtual" ]] && sp_flag=(--layers 4 --micro-batch 1 --pp-virtual "$virtual" "${sp_flag[@]:2}")
  "$bin" "${train_args[@]}" --tp "$tp" --dp "$dp" --pp "$pp" --zero "$zero" "${sp_flag[@]}" --backend threads >"$work/threads_$name" 2>"$work/threads_$name.err" ||
    { rc=$?; cat "$work/threads_$name.err"; echo "FAILED $name: the threads run exited with $rc"; exit 1; }
  "${mpirun[@]}" -np $((tp * dp * pp)) "$bin" "${train_args[@]}" --tp "$tp" --dp "$dp" --pp "$pp" --zero "$zero" "${sp_flag[@]}" --backend mpi \
    >"$work/mpi_$name" 2>"$work/mpi_$name.err" ||
    { rc=$?; cat "$work/mpi_$name.err"; echo "FAILED $name: the mpi run exited with $rc"; exit 1; }
  compare "$name" "$work/threads_$name" "$work/mpi_$name"
done

# The comparison is not blind: another initialisation gives other losses.
"$bin" "${train_args[@]}" --layers 2 --tp 2 --backend threads --init-seed 12345 >"$work/other_seed" 2>/dev/null
if diff -q <(losses "$work/threads_tp2_dp1_pp1_zero0_sp0") <(losses "$work/other_seed") >/dev/null; then
  echo "FAILED: a run from another --init-seed printed the same records"; fail=1
else
  echo "ok: a run from another --init-seed differs"
fi
exit "$fail"
