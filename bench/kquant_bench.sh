#!/usr/bin/env bash
# GGUF quant presets end to end (bench/kquant_bench.py): llama.cpp's quantizer makes Q4_K_M, Q5_K_M,
# Q6_K, Q4_0 and Q8_0 files from the default model; tensorpar loads each at tp 1 and tp 2 (weight
# memory per rank, perplexity) beside llama.cpp's perplexity on the same file and tokens.
# Uses the venv of bench/infer_bench.sh (<repo>/.venv-bench, llama-cpp-python built from its PyPI
# sdist; made here on demand the same way) and fetches the default model.
#
# Usage: bench/kquant_bench.sh [--bin build/bin/tensorpar] [--out results.json] ...
#   env: BENCH_VENV (default <repo>/.venv-bench), LLAMA_CPP_PYTHON_VERSION (default 0.3.36)
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${BENCH_VENV:-$REPO/.venv-bench}"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
STAMP="$VENV/.llama-cpp-python-$VERSION"

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "kquant_bench: creating $VENV" >&2
  python3 -m venv "$VENV" >&2
  echo '*' > "$VENV/.gitignore"  # never committed
fi
if [[ ! -f "$STAMP" ]]; then
  echo "kquant_bench: building llama-cpp-python $VERSION from source (several minutes)" >&2
  CMAKE_BUILD_PARALLEL_LEVEL=2 \
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    "$VENV/bin/pip" install --no-binary llama-cpp-python "llama-cpp-python==$VERSION" numpy >&2
  touch "$STAMP"
fi
model=$(bash "$REPO/tools/fetch_model.sh" --quiet)
exec "$VENV/bin/python" "$REPO/bench/kquant_bench.py" --source "$model" "$@"
