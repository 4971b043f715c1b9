#!/usr/bin/env bash
# Training throughput (tensorpar tp 1 x 2 threads, tp 2 x 1 thread, dp 2, f32 and --bf16, beside
# PyTorch with torch.compile and fused AdamW, and eager, on the same ~10M-parameter Llama and the
# same pinned cores): runs bench/train_bench.py in the tools venv.
# Usage: bench/train_bench.sh [--bin build/bin/tensorpar] [--rounds 3] [--cores 0,1] [--out results.json]
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY=$("$REPO/tools/venv.sh")
exec "$PY" "$REPO/bench/train_bench.py" "$@"
