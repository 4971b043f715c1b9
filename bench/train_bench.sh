#!/usr/bin/env bash
# Training throughput benchmark of issue 5 (tensorpar tp 1 x 2 threads, tp 2 x 1 thread, beside
# PyTorch with 2 threads on the same ~10M-parameter Llama): runs bench/train_bench.py in the tools
# venv. Usage: bench/train_bench.sh [--bin build/bin/tensorpar] [--rounds 2] [--out results.json]
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY=$("$REPO/tools/venv.sh")
exec "$PY" "$REPO/bench/train_bench.py" "$@"
