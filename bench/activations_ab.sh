#!/usr/bin/env bash
# tensorpar's two inference paths for GGUF weights side by side on one file, interleaved:
# --activations int8 (the default on AVX512-VNNI CPUs) and --activations f32. Decode: 128 greedy
# tokens after the first 120 characters of GPL-3; prefill: its first 1000 characters (the protocol
# of bench/infer_bench.sh). Prints one JSON line per run and the medians.
# Usage: bench/activations_ab.sh [MODEL.gguf] [ROUNDS] [BIN]
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}"
rounds="${2:-3}"
bin="${3:-build/bin/tensorpar}"
text=/usr/share/common-licenses/GPL-3
short=$(head -c 120 "$text")
long=$(head -c 1000 "$text")
for r in $(seq "$rounds"); do
  for act in int8 f32; do
    dec=$("$bin" generate --model "$model" --prompt "$short" --max-tokens 128 --activations "$act" --json 2>/dev/null | tail -1)
    pre=$("$bin" generate --model "$model" --prompt "$long" --max-tokens 1 --activations "$act" --json 2>/dev/null | tail -1)
    python3 -c 'import json,sys; d,p=json.loads(sys.argv[1]),json.loads(sys.argv[2]); print(json.dumps({"round": int(sys.argv[3]), "activations": sys.argv[4], "decode_tok_s": d["decode_tok_s"], "decode_tokens": d["tokens"], "prefill_tok_s": p["prefill_tok_s"], "prompt_tokens": p["prompt_tokens"]}))' "$dec" "$pre" "$r" "$act"
  done
done | tee /dev/stderr | python3 -c '
import json, statistics, sys
rows = [json.loads(l) for l in sys.stdin]
for act in ("int8", "f32"):
    rs = [r for r in rows if r["activations"] == act]
    dec = statistics.median(r["decode_tok_s"] for r in rs)
    pre = statistics.median(r["prefill_tok_s"] for r in rs)
    print("%s: decode %.1f tok/s, prefill %.1f tok/s (medians of %d)" % (act, dec, pre, len(rs)))
'
