#!/usr/bin/env bash
# Runs the Python tests of `tensorpar serve` (tests/serve/test_*.py) with pytest from the small
# venv of tools/venv.sh serve, on the default model (tools/fetch_model.sh).
# Usage: tests/serve/run_python_tests.sh BINARY [pytest args: files, -k EXPR, -x, -s ...]
#   e.g. tests/serve/run_python_tests.sh build/bin/tensorpar tests/serve/test_openai_api.py -k stop
# ctest runs it (tests/serve/CMakeLists.txt). Env: see tests/serve/conftest.py.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
[[ $# -ge 1 ]] || { echo "usage: $0 BINARY [pytest args]" >&2; exit 2; }
BIN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
shift
PY="$(bash "$REPO/tools/venv.sh" serve)"
export TENSORPAR_BIN="$BIN"
export TP_MODEL="${TP_MODEL:-$(bash "$REPO/tools/fetch_model.sh" --quiet)}"
export PYTHONDONTWRITEBYTECODE=1
cd "$REPO/tests/serve"
# Paths given relative to the repository root work too.
args=()
for a in "$@"; do
  if [[ "$a" == tests/serve/* ]]; then args+=("${a#tests/serve/}"); else args+=("$a"); fi
done
exec "$PY" -m pytest -p no:cacheprovider -rfEs -v "${args[@]}"
