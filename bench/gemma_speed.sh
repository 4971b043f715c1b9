#!/usr/bin/env bash
# Gemma 3 270M (Q4_K_M GGUF, tools/fetch_model.sh gemma3-270m): decode and prefill of tensorpar
# (tp 1 x 2 threads, tp 2 x 1 thread, and tp 1 x 2 with the f16 KV cache) beside llama.cpp (llama-cpp-python from tools/venv.sh bench,
# 2 threads, weight repacking off on AMX CPUs only: its AMX repacked path crashes on this model there), all
# pinned to cores 0,1, ROUNDS interleaved rounds; prints one JSON line per run. Decode: 64 tokens
# after an 8-token prompt (tensorpar stops at EOS if the model emits it; tokens/s over the steps
# run); prefill: the first 1500 characters of the GPL-3 text, 2 tokens.
# Usage: bench/gemma_speed.sh [ROUNDS] > out.jsonl
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
ROUNDS="${1:-3}"
M=models/gemma-3-270m-q4_k_m.gguf
[ -f "$M" ] || { echo "no $M (run: bash tools/fetch_model.sh gemma3-270m)" >&2; exit 1; }
PY=$(tools/venv.sh bench)
P="$(head -c 1500 /usr/share/common-licenses/GPL-3 | tr '\n' ' ')"
D="The history of the printing press begins"
emit() { echo "{\"round\": $1, \"engine\": \"$2\", \"kind\": \"$3\", \"load\": $(cut -d' ' -f1 /proc/loadavg), \"result\": $4}"; }
for r in $(seq "$ROUNDS"); do
  for mode in "1 2 f32" "2 1 f32" "1 2 f16"; do
    set -- $mode
    name="tensorpar tp$1 x$2"
    if [ "$3" = f16 ]; then name="$name, f16 KV"; fi
    emit "$r" "$name" decode "$(taskset -c 0,1 build/bin/tensorpar generate -m $M --tp $1 -t $2 --kv-dtype $3 -p "$D" -n 64 --json 2>/dev/null)"
    emit "$r" "$name" prefill "$(taskset -c 0,1 build/bin/tensorpar generate -m $M --tp $1 -t $2 --kv-dtype $3 -p "$P" -n 2 --json 2>/dev/null)"
  done
  emit "$r" "llama.cpp" decode "$(taskset -c 0,1 "$PY" bench/decode_bench.py llama-worker --no-repack --model $M --prompt "$D" --max-tokens 64 2>/dev/null)"
  emit "$r" "llama.cpp" prefill "$(taskset -c 0,1 "$PY" bench/decode_bench.py llama-worker --no-repack --model $M --prompt "$P" --max-tokens 2 2>/dev/null)"
done
