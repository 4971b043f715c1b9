#!/usr/bin/env bash
# Inference benchmark of issue 4: tensorpar (tp 1 x 2 threads, tp 2 x 1 thread) beside llama.cpp
# on the same GGUF and thread count; prefill/decode tok/s, perplexity, weight memory per rank.
# Makes (on demand) the venv <repo>/.venv-bench with llama-cpp-python built from its PyPI sdist
# (needs cmake and a C++ compiler; minutes on 2 cores), fetches the default model, then runs
# bench/infer_bench.py with the given arguments (see --help there).
#
# Usage: bench/infer_bench.sh [--bin build/bin/tensorpar] [--rounds 5] [--out results.json] ...
#   env: BENCH_VENV (default <repo>/.venv-bench), LLAMA_CPP_PYTHON_VERSION (default 0.3.36)
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${BENCH_VENV:-$REPO/.venv-bench}"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
STAMP="$VENV/.llama-cpp-python-$VERSION"

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "infer_bench: creating $VENV" >&2
  python3 -m venv "$VENV" >&2
  echo '*' > "$VENV/.gitignore"  # never committed
fi
if [[ ! -f "$STAMP" ]]; then
  echo "infer_bench: building llama-cpp-python $VERSION from source (several minutes)" >&2
  # Native ISA (same machine as the run), no examples/tests; -j2 as everything on this machine.
  CMAKE_BUILD_PARALLEL_LEVEL=2 \
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    "$VENV/bin/pip" install --no-binary llama-cpp-python "llama-cpp-python==$VERSION" numpy >&2
  touch "$STAMP"
fi
if [[ ! " $* " == *" --model "* ]]; then
  model=$(bash "$REPO/tools/fetch_model.sh" --quiet)
  set -- --model "$model" "$@"
fi
exec "$VENV/bin/python" "$REPO/bench/infer_bench.py" "$@"
