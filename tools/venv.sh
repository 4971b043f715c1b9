#!/usr/bin/env bash
# Creates (on demand) the Python venv for tools/ at <repo>/.venv with tools/requirements.txt and
# prints its python path. Idempotent: a stamp file records the installed requirements.
# Usage: PY=$(tools/venv.sh) && "$PY" tools/make_fixtures.py
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$REPO/.venv"
REQ="$REPO/tools/requirements.txt"
STAMP="$VENV/.tools-requirements"
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "venv: creating $VENV" >&2
  python3 -m venv "$VENV" >&2
fi
if ! cmp -s "$REQ" "$STAMP"; then
  echo "venv: installing $(grep -cv '^#' "$REQ") packages (torch pulls ~3 GB of CUDA wheels)" >&2
  "$VENV/bin/pip" install -r "$REQ" >&2
  cp "$REQ" "$STAMP"
fi
echo "$VENV/bin/python"
