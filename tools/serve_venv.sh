#!/usr/bin/env bash
# Creates (on demand) the small Python venv for the server tests and benchmarks at <repo>/.venv-serve
# with tools/requirements-serve.txt (openai, pytest, selenium, aiohttp; no torch) and prints its
# python path. Idempotent: a stamp file records the installed requirements.
# Usage: PY=$(tools/serve_venv.sh) && "$PY" -m pytest tests/serve     (env: SERVE_VENV overrides the path)
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${SERVE_VENV:-$REPO/.venv-serve}"
REQ="$REPO/tools/requirements-serve.txt"
STAMP="$VENV/.serve-requirements"
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "serve_venv: creating $VENV" >&2
  python3 -m venv "$VENV" >&2
fi
if ! cmp -s "$REQ" "$STAMP"; then
  echo "serve_venv: installing $(grep -cv '^\s*\(#\|$\)' "$REQ") packages" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ" >&2
  cp "$REQ" "$STAMP"
fi
echo "$VENV/bin/python"
