#!/usr/bin/env bash
# Creates (on demand) a Python venv and prints its python path. Idempotent: a stamp file records
# the installed requirements.
#   tools/venv.sh         <repo>/.venv with tools/requirements.txt (torch, transformers, gguf, ...:
#                         fixture makers, references, plots; torch pulls ~3 GB of wheels)
#   tools/venv.sh serve   <repo>/.venv-serve with tools/requirements-serve.txt (openai, pytest,
#                         selenium, aiohttp; no torch): the server tests and benchmarks
#   tools/venv.sh bench   <repo>/.venv-bench with tools/requirements-bench.txt (llama-cpp-python
#                         built natively from its sdist): the peer of bench/'s comparisons
# Usage: PY=$(tools/venv.sh) && "$PY" tools/make_fixtures.py
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
case "${1:-}" in
  "") VENV="$REPO/.venv"; REQ="$REPO/tools/requirements.txt" ;;
  serve) VENV="${SERVE_VENV:-$REPO/.venv-serve}"; REQ="$REPO/tools/requirements-serve.txt" ;;
  bench)
    VENV="${BENCH_VENV:-$REPO/.venv-bench}"; REQ="$REPO/tools/requirements-bench.txt"
    # llama.cpp for this machine's ISA, no examples or tests; -j2 like everything here.
    export CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
    export CMAKE_BUILD_PARALLEL_LEVEL=2 ;;
  *) echo "usage: $0 [serve|bench]" >&2; exit 2 ;;
esac
STAMP="$VENV/.requirements"
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "venv: creating $VENV" >&2
  python3 -m venv "$VENV" >&2
fi
if ! cmp -s "$REQ" "$STAMP"; then
  echo "venv: installing $(grep -cv '^\s*\(#\|$\)' "$REQ") packages into $VENV" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ" >&2
  cp "$REQ" "$STAMP"
fi
echo "$VENV/bin/python"
