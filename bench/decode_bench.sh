#!/usr/bin/env bash
# Decode/prefill of 16-bit weights at 0.3B / 0.7B / 1.5B (issue 19): makes the venvs on demand
# (tools/venv.sh: .venv with torch + transformers; tools/venv.sh bench: .venv-bench with
# llama-cpp-python built natively from its sdist), the models under models/decode-bench/
# (random, fixed seed; bf16 safetensors + bf16 GGUF), then runs bench/decode_bench.py run.
#
# Usage: bench/decode_bench.sh [--bin build/bin/tensorpar] [--sizes 0.3b,0.7b,1.5b] [--rounds 3] [--out F]
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY=$("$REPO/tools/venv.sh")
BENCH_PY=$("$REPO/tools/venv.sh" bench)
export DECODE_BENCH_LLAMA_PY="$BENCH_PY"
sizes="0.3b,0.7b,1.5b"
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do [[ "${args[$i]}" == --sizes ]] && sizes="${args[$((i + 1))]}"; done
"$PY" "$REPO/bench/decode_bench.py" make --sizes "$sizes"
exec "$PY" "$REPO/bench/decode_bench.py" run "$@"
