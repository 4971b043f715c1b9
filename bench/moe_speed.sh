#!/usr/bin/env bash
# A mixture-of-experts model against dense models, decode and prefill through `tensorpar generate`:
# a Mixtral (8 layers, hidden 512, 8 heads / 2 kv heads, 8 experts of ffn 1024, top 2: 107M
# parameters, 31M active per token) beside a dense Llama of the same active parameters (ffn 2048)
# and one of the same total parameters (ffn 8192), random weights (one training step from a fixed
# seed, 512 positions, exported as HF directories under runs/moe-bench/), f32. Runs tp 1 x 2 threads, tp 2 x 1
# thread, and the MoE at tp 2 x ep 2 (experts split by owner instead of by ffn slice), pinned to
# cores 0,1, ROUNDS interleaved rounds; one JSON line per run (generate --json: decode_tok_s,
# prefill_tok_s, weights_kv_mb_per_rank). Decode: 64 tokens after a short prompt; prefill: 375
# tokens (the first 800 characters of the GPL-3 text), 2 generated.
# Usage: bench/moe_speed.sh [ROUNDS] > out.jsonl
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
ROUNDS="${1:-3}"
B=build/bin/tensorpar
T=tests/fixtures/tokenizer/gpt2_trained.tokenizer.json
W=runs/moe-bench
mkdir -p "$W"
make_model() {  # name, extra train flags
  [ -d "$W/$1-hf" ] && return
  $B train --arch llama --layers 8 --hidden 512 --heads 8 --kv-heads 2 --seq 512 --vocab-from $T \
    --data /usr/share/games/fortunes --max-data-tokens 20000 --batch 1 --steps 1 --init-seed 7 \
    --out "$W/$1" "${@:2}" >/dev/null 2>&1
  $B export --checkpoint "$W/$1" --out "$W/$1-hf" >/dev/null 2>&1
}
make_model moe --ffn 1024 --experts 8 --experts-per-token 2
make_model dense-active --ffn 2048
make_model dense-total --ffn 8192
P="$(head -c 800 /usr/share/common-licenses/GPL-3 | tr '\n' ' ')"
D="The history of the printing press begins"
emit() { echo "{\"round\": $1, \"model\": \"$2\", \"split\": \"$3\", \"kind\": \"$4\", \"load\": $(cut -d' ' -f1 /proc/loadavg), \"result\": $5}"; }
for r in $(seq "$ROUNDS"); do
  for m in moe dense-active dense-total; do
    splits=("--tp 1 -t 2" "--tp 2 -t 1")
    [ "$m" = moe ] && splits+=("--tp 2 --ep 2 -t 1")
    for s in "${splits[@]}"; do
      emit "$r" "$m" "$s" decode "$(taskset -c 0,1 $B generate -m "$W/$m-hf" $s -p "$D" -n 64 --json 2>/dev/null)"
      emit "$r" "$m" "$s" prefill "$(taskset -c 0,1 $B generate -m "$W/$m-hf" $s -p "$P" -n 2 --json 2>/dev/null)"
    done
  done
done
