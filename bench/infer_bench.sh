#!/usr/bin/env bash
# Inference benchmark of issue 4: tensorpar (tp 1 x 2 threads, tp 2 x 1 thread) beside llama.cpp
# on the same GGUF and thread count; prefill/decode tok/s, perplexity, weight memory per rank.
# Makes (on demand) the venv <repo>/.venv-bench (tools/venv.sh bench: llama-cpp-python built from
# its PyPI sdist; needs cmake and a C++ compiler, minutes on 2 cores), fetches the default model,
# then runs bench/infer_bench.py with the given arguments (see --help there).
#
# Usage: bench/infer_bench.sh [--bin build/bin/tensorpar] [--rounds 5] [--out results.json] ...
#   env: BENCH_VENV (default <repo>/.venv-bench)
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="$(bash "$REPO/tools/venv.sh" bench)"
if [[ ! " $* " == *" --model "* ]]; then
  model=$(bash "$REPO/tools/fetch_model.sh" --quiet)
  set -- --model "$model" "$@"
fi
exec "$PY" "$REPO/bench/infer_bench.py" "$@"
