#!/usr/bin/env python3
"""Pipeline stages at inference (`generate --pp P`) beside tensor parallelism on the same cores.

For each layout, `tensorpar generate --json` runs a long prompt (prefill) and then decodes; the
prefill and decode tokens/s it prints (timed inside the run, not counting the load) and the
weights + KV cache per rank are read. Every layout uses the same total threads (the process's
cores: one rank of 2 threads, or 2 ranks of 1). Layouts alternate within each round; medians over
--rounds. "pp 2, no micro-batches" (--pp-micro-rows 0) runs each forward whole through the
stages, one stage idle while the other computes; the default cuts a prefill into micro-batches
of >= 64 rows (at most 4 x pp) so the stages overlap. The text of every layout is checked equal
to tp 1's (pipeline stages compute the same floats; tp 2 may differ at a near tie).

Usage: python3 bench/pipeline_inference.py [--bin build/bin/tensorpar] [--model M] [--rounds 3]
           [--out docs/results/pipeline_inference.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYOUTS = [
    ("tp 1 x 2 threads", ["--tp", "1", "--threads-per-rank", "2"]),
    ("tp 2", ["--tp", "2", "--threads-per-rank", "1"]),
    ("pp 2", ["--pp", "2", "--threads-per-rank", "1"]),
    ("pp 2, no micro-batches", ["--pp", "2", "--threads-per-rank", "1", "--pp-micro-rows", "0"]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "build/bin/tensorpar"))
    ap.add_argument("--model", default=os.path.join(REPO, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt-chars", type=int, default=4000)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    with open("/usr/share/games/fortunes/computers", encoding="utf-8", errors="replace") as f:
        text = f.read(a.prompt_chars)
    prompt = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    prompt.write(text)
    prompt.close()
    runs = {name: [] for name, _ in LAYOUTS}
    try:
        for _ in range(a.rounds):
            for name, flags in LAYOUTS:
                cmd = [a.bin, "generate", "-m", a.model, "--prompt-file", prompt.name, "-n", str(a.max_tokens),
                       "--temperature", "0", "--json", *flags]
                p = subprocess.run(cmd, capture_output=True, text=True)
                if p.returncode != 0:
                    sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
                runs[name].append(json.loads(p.stdout.strip().split("\n")[-1]))
    finally:
        os.unlink(prompt.name)
    ref_text = runs[LAYOUTS[0][0]][0]["text"]
    rows = []
    print(f"{os.path.basename(a.model)}, prompt {runs[LAYOUTS[0][0]][0]['prompt_tokens']} tokens, "
          f"{a.max_tokens} decoded, medians of {a.rounds} rounds\n")
    print("| layout | prefill tok/s | decode tok/s | weights + KV per rank, MiB | text = tp 1's |")
    print("|---|---|---|---|---|")
    for name, _ in LAYOUTS:
        rs = runs[name]
        row = {"layout": name,
               "prefill_tok_s": statistics.median(r["prefill_tok_s"] for r in rs),
               "decode_tok_s": statistics.median(r["decode_tok_s"] for r in rs),
               "prefill_rounds": [r["prefill_tok_s"] for r in rs],
               "decode_rounds": [r["decode_tok_s"] for r in rs],
               "weights_kv_mb_per_rank": rs[0]["weights_kv_mb_per_rank"],
               "same_text_as_tp1": all(r["text"] == ref_text for r in rs)}
        rows.append(row)
        mem = " / ".join(f"{m:.0f}" for m in row["weights_kv_mb_per_rank"])
        print(f"| {name} | {row['prefill_tok_s']:.0f} | {row['decode_tok_s']:.1f} | {mem} | "
              f"{'yes' if row['same_text_as_tp1'] else 'no'} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"model": os.path.basename(a.model), "rounds": a.rounds, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
