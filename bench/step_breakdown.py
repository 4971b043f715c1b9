#!/usr/bin/env python3
"""Where a training step's time goes, per layout: compute, tensor-parallel communication, pipeline
wait and data-parallel communication, from `tensorpar train --json` (`comm_s`: the seconds world
rank 0 spent inside each group's collectives and point-to-point calls during the step;
`compute_s`: the rest of the step).

What each part means on this implementation:
  - tp: the all-reduces of the layers (or SP's all-gathers / reduce-scatters), the vocab-parallel
    loss and the gradient norm; includes waiting for the slower TP rank to arrive;
  - pp: the pipeline's sends and receives of activations and their gradients, with the time a
    stage waits for its neighbour (the bubble shows up here);
  - dp: the gradient reduction after backward: with --dp-bucket-mb (the default) the wait for the
    buckets still in flight when backward returns, without it (or under ZeRO-1's reduce-scatter /
    all-gather) all of it;
  - compute: everything else on the rank (matmuls, attention, optimizer, data).
Two ranks, one thread each, pinned to two cores; medians over the steps after the first two and
over --rounds interleaved rounds. Prints a Markdown table and writes --out JSON.

Usage: python3 bench/step_breakdown.py [--bin build/bin/tensorpar] [--steps 8] [--rounds 3] [--out F]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER = os.path.join(REPO, "tests/fixtures/tokenizer/gpt2_trained.tokenizer.json")
DATA = "/usr/share/games/fortunes/computers"
MODEL = ["--arch", "llama", "--layers", "8", "--hidden", "384", "--heads", "6", "--kv-heads", "2",
         "--ffn", "1024", "--seq", "256"]
LAYOUTS = [
    ("tp 1 (one rank, one thread)", ["--tp", "1"], "0"),
    ("tp 2", ["--tp", "2"], "0,1"),
    ("tp 2 + SP", ["--tp", "2", "--sequence-parallel"], "0,1"),
    ("pp 2, 4 micro-batches", ["--pp", "2"], "0,1"),
    ("dp 2", ["--dp", "2"], "0,1"),
    ("dp 2 + ZeRO-1", ["--dp", "2", "--zero", "1"], "0,1"),
]


def one_run(a, flags, cores):
    cmd = ["taskset", "-c", cores, a.bin, "train", *MODEL, "--vocab-from", TOKENIZER, "--data", DATA,
           "--batch", "8", "--micro-batch", "2", "--steps", str(a.steps), "--lr", "1e-3",
           "--threads-per-rank", "1", "--json", *flags]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    steps = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")][2:]
    med = lambda xs: statistics.median(xs)
    return {"step_ms": med([s["ms_per_step"] for s in steps]),
            "compute_ms": 1000 * med([s["compute_s"] for s in steps]),
            **{f"{g}_ms": 1000 * med([s["comm_s"][g] for s in steps]) for g in ("tp", "pp", "dp")}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "build/bin/tensorpar"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    runs = {name: [] for name, _, _ in LAYOUTS}
    for _ in range(a.rounds):
        for name, flags, cores in LAYOUTS:
            runs[name].append(one_run(a, flags, cores))
    print("Llama 8 layers, hidden 384, 6/2 heads, ffn 1024, seq 256; batch 8 in micro-batches of 2; "
          f"world rank 0, ms per step, medians of {a.rounds} rounds\n")
    print("| layout | step | compute | tp | pp | dp |")
    print("|---|---|---|---|---|---|")
    rows = []
    for name, _, _ in LAYOUTS:
        row = {"layout": name, **{k: statistics.median(r[k] for r in runs[name]) for k in runs[name][0]}}
        rows.append(row)
        step = row["step_ms"]
        cell = lambda k: f"{row[k]:.1f} ({100 * row[k] / step:.0f}%)"
        print(f"| {name} | {step:.1f} | {cell('compute_ms')} | {cell('tp_ms')} | {cell('pp_ms')} | {cell('dp_ms')} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"rounds": a.rounds, "steps": a.steps, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
