#!/usr/bin/env python3
"""Two tensorpar builds side by side (A = before a change, B = after): decode and prefill tok/s of
`generate` on a GGUF model and training tokens/s of `train` on a small Llama, at tp 1 x 2 threads
and tp 2 x 1 thread (2 cores each way). Rounds interleave the builds (A, B, A, B, ...) so load on
a shared machine hits both alike; reports medians over rounds and B/A ratios. Every run is a fresh
process; decode tok/s is what `generate --json` reports (generated tokens / decode time), training
tokens/s the median over the steps after warm-up of `train --json` (batch x seq / step time).

Usage: bench/ab_builds.py --a OLD_BINARY --b build/bin/tensorpar [--rounds 3] [--no-train]
           [--decode-tokens 64] [--model FILE.gguf] [--long-prompt-chars 2000]
           [--long-decode-tokens N] [--kv-dtype f32|f16] [--out FILE.json]

--long-decode-tokens N adds `decode_long`: N tokens generated after the long prompt (decode at
that context, where attention reads the whole KV cache every step).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT_SHORT = "The capital of France is"


def last_json(out):
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    return rows


def generate(binary, a, tp, threads, prompt, max_tokens):
    cmd = [binary, "generate", "--model", a.model, "--prompt", prompt, "--max-tokens", str(max_tokens),
           "--tp", str(tp), "--threads-per-rank", str(threads), "--kv-dtype", a.kv_dtype, "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"ab_builds: {' '.join(cmd)} failed:\n{p.stderr}")
    return last_json(p.stdout)[-1]


def train(binary, a, tp, threads):
    cmd = [binary, "train", "--arch", "llama", "--layers", "4", "--hidden", "256", "--heads", "4", "--kv-heads", "2",
           "--ffn", "688", "--seq", "128", "--vocab-from", a.tokenizer, "--data", a.data, "--batch", "8",
           "--steps", str(a.train_steps), "--lr", "1e-3", "--tp", str(tp), "--threads-per-rank", str(threads),
           "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"ab_builds: {' '.join(cmd)} failed:\n{p.stderr}")
    rows = [r for r in last_json(p.stdout) if "tokens_per_s" in r]
    return {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in rows[2:]),
            "losses": [r["loss"] for r in rows]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="binary A (before)")
    ap.add_argument("--b", required=True, help="binary B (after)")
    ap.add_argument("--model", default=os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--tokenizer", default=os.path.join(REPO, "tests/fixtures/tokenizer/gpt2_trained.tokenizer.json"))
    ap.add_argument("--data", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--long-prompt", default="/usr/share/common-licenses/GPL-3", help="file: its first chars")
    ap.add_argument("--long-prompt-chars", type=int, default=2000)
    ap.add_argument("--long-decode-tokens", type=int, default=0, help="decode_long: tokens after the long prompt")
    ap.add_argument("--kv-dtype", default="f32", choices=["f32", "f16"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--train-steps", type=int, default=8)
    ap.add_argument("--no-train", action="store_true", help="decode and prefill only (an inference change)")
    ap.add_argument("--decode-tokens", type=int, default=64, help="tokens generated per decode run")
    ap.add_argument("--out")
    a = ap.parse_args()
    long_prompt = open(a.long_prompt, encoding="utf-8", errors="replace").read()[:a.long_prompt_chars]
    layouts = [(1, 2), (2, 1)]
    metrics = ("decode", "prefill", "decode_long", "train")
    res = {k: {f"tp{tp}x{th}": {m: [] for m in metrics} for tp, th in layouts} for k in "ab"}
    losses = {}
    for r in range(a.rounds):
        for key in "ab":
            binary = a.a if key == "a" else a.b
            for tp, th in layouts:
                cell = res[key][f"tp{tp}x{th}"]
                cell["decode"].append(generate(binary, a, tp, th, PROMPT_SHORT, a.decode_tokens)["decode_tok_s"])
                cell["prefill"].append(generate(binary, a, tp, th, long_prompt, 1)["prefill_tok_s"])
                if a.long_decode_tokens:
                    cell["decode_long"].append(
                        generate(binary, a, tp, th, long_prompt, a.long_decode_tokens)["decode_tok_s"])
                if not a.no_train:
                    t = train(binary, a, tp, th)
                    cell["train"].append(t["tokens_per_s"])
                    losses[f"{key} tp{tp}x{th}"] = t["losses"]
            print(f"round {r + 1}/{a.rounds} {key} done", file=sys.stderr)
    print(f"{'layout':10} {'metric':11} {'A median':>10} {'B median':>10} {'B/A':>6}")
    summary = {}
    for tp, th in layouts:
        lay = f"tp{tp}x{th}"
        for m in (("decode", "prefill") + (("decode_long",) if a.long_decode_tokens else ())
                  + (() if a.no_train else ("train",))):
            ma, mb = statistics.median(res["a"][lay][m]), statistics.median(res["b"][lay][m])
            summary[f"{lay} {m}"] = {"a": ma, "b": mb, "ratio": mb / ma}
            print(f"{lay:10} {m:11} {ma:10.1f} {mb:10.1f} {mb / ma:6.2f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"args": vars(a), "raw": res, "summary": summary, "train_losses": losses}, f, indent=1)


if __name__ == "__main__":
    main()
