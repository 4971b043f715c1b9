#!/usr/bin/env bash
# One prepared GPU check (run it on a machine with an NVIDIA GPU, e.g. a lent H200): configures a
# release build, builds the NCCL/CUDA test binaries and runs them. On one GPU the NCCL backend runs
# as a world of one on device buffers (every op, dtype, in-place form, split, debug fingerprints)
# plus an init whose second rank never comes (must time out, not hang). Any other CUDA test
# binary (test_*cuda*) that exists is built and run too. Fails if the GPU tests were skipped.
# Usage: tools/gpu_check.sh [build-dir]   (default build-gpu; logs go to $OUT if set, else the build dir)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build-gpu}"
LOG_DIR="${OUT:-$BUILD}"
mkdir -p "$LOG_DIR"
JOBS="$(nproc)"

echo "== GPU"
# GPU_CHECK_DRY=1: check the script itself on a machine without a GPU (tests skip themselves).
nvidia-smi -L || [[ -n "${GPU_CHECK_DRY:-}" ]] || { echo "gpu_check: no GPU visible (nvidia-smi failed)"; exit 1; }

echo "== configure + build ($BUILD, -j$JOBS)"
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release | tee "$LOG_DIR/gpu_configure.log" | grep "tensorpar:"
grep -q "NCCL=ON" "$LOG_DIR/gpu_configure.log" || { echo "gpu_check: CUDA/NCCL not found at configure"; exit 1; }
targets=(test_comm_nccl)
for t in $(cmake --build "$BUILD" --target help 2>/dev/null | grep -oE 'test_[a-z_]*cuda[a-z_]*' | sort -u); do
  targets+=("$t")
done
cmake --build "$BUILD" --target "${targets[@]}" -j "$JOBS"

status=0
run() {  # name, command...: runs under a time limit, logs, remembers failure
  local name="$1"; shift
  echo "== $name"
  local rc=0
  timeout 300 "$@" >"$LOG_DIR/gpu_$name.log" 2>&1 || rc=$?
  cat "$LOG_DIR/gpu_$name.log"
  [[ $rc -eq 0 ]] || { echo "gpu_check: $name exited with status $rc"; status=1; }
  if [[ -z "${GPU_CHECK_DRY:-}" ]] && grep -q '\[  SKIPPED \]' "$LOG_DIR/gpu_$name.log"; then
    echo "gpu_check: $name skipped tests although a GPU is visible"; status=1
  fi
}
# The timeout test last and alone: if NCCL's abort of a pending init misbehaves, it cannot hide
# the correctness results.
run nccl_ops "$BUILD/bin/test_comm_nccl" --gtest_filter='NcclSolo.*:-NcclSolo.InitWithMissingPeerTimesOut'
run nccl_timeout "$BUILD/bin/test_comm_nccl" --gtest_filter='NcclSolo.InitWithMissingPeerTimesOut'
for t in "${targets[@]:1}"; do run "$t" "$BUILD/bin/$t"; done

if [[ $status -eq 0 ]]; then echo "gpu_check: all GPU tests passed"; else echo "gpu_check: FAILED"; fi
exit $status
