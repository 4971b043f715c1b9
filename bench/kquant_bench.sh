#!/usr/bin/env bash
# GGUF quant presets end to end (bench/kquant_bench.py): llama.cpp's quantizer makes Q4_K_M, Q5_K_M,
# Q6_K, Q4_0 and Q8_0 files from the default model; tensorpar loads each at tp 1 and tp 2 (weight
# memory per rank, perplexity) beside llama.cpp's perplexity on the same file and tokens.
# Uses the venv of tools/venv.sh bench (<repo>/.venv-bench, llama-cpp-python built from its PyPI
# sdist, made on demand) and fetches the default model.
#
# Usage: bench/kquant_bench.sh [--bin build/bin/tensorpar] [--out results.json] ...
#   env: BENCH_VENV (default <repo>/.venv-bench)
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="$(bash "$REPO/tools/venv.sh" bench)"
model=$(bash "$REPO/tools/fetch_model.sh" --quiet)
exec "$PY" "$REPO/bench/kquant_bench.py" --source "$model" "$@"
