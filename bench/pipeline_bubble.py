#!/usr/bin/env python3
"""The pipeline bubble of `tensorpar train --pp P` (1F1B, and interleaved with --pp-virtual V)
measured against (p - 1) / (m v + p - 1).

For each micro-batch count m (the batch cut into m micro-batches), runs the same training steps
on one rank (--pp 1, the same micro-batches one after another) and on P stages with each of the
--virtual chunk counts V (V > 1 only where m is a multiple of P, as the interleaved schedule
needs), one thread per rank, pinned to the first P cores; the idle fraction of a stage is
measured as
    bubble = 1 - T1 / (P x Tp)
(T1: one rank's step time, Tp: the pipeline's; with no bubble and no communication the P stages
would take T1 / P). The schedule's own bubble is (p - 1) / v of one micro-batch's time against
m of them: (p - 1) / (m v + p - 1) of the step. Step time = batch x seq / median tokens/s over
the steps after the first two, medians over --rounds interleaved rounds. Prints a Markdown table
and writes --out JSON.

Usage: python3 bench/pipeline_bubble.py [--bin build/bin/tensorpar] [--pp 2] [--micro 1,2,4,8]
           [--virtual 1,2] [--rounds 3] [--out docs/results/pipeline_bubble.json]
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
         "--ffn", "1024", "--seq", "128"]


def step_time(a, pp, micro_batch, virtual=1):
    cmd = ["taskset", "-c", ",".join(str(i) for i in range(pp)), a.bin, "train", *MODEL,
           "--vocab-from", TOKENIZER, "--data", DATA, "--batch", str(a.batch),
           "--micro-batch", str(micro_batch), "--steps", str(a.steps), "--lr", "1e-3", "--pp", str(pp),
           "--pp-virtual", str(virtual), "--threads-per-rank", "1", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    tok = [json.loads(l)["tokens_per_s"] for l in p.stdout.splitlines() if l.startswith("{")][2:]
    return a.batch * 128 / statistics.median(tok)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "build/bin/tensorpar"))
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--micro", default="1,2,4,8", help="micro-batches per step")
    ap.add_argument("--virtual", default="1,2", help="model chunks per stage (--pp-virtual) to measure")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    if len(os.sched_getaffinity(0)) < a.pp:
        sys.exit(f"needs {a.pp} cores")
    ms = [int(x) for x in a.micro.split(",")]
    vs = [int(x) for x in a.virtual.split(",")]
    runs = {m: {"t1": [], **{v: [] for v in vs if v == 1 or m % a.pp == 0}} for m in ms}
    for _ in range(a.rounds):
        for m in ms:
            runs[m]["t1"].append(step_time(a, 1, a.batch // m))
            for v in vs:
                if v in runs[m]:
                    runs[m][v].append(step_time(a, a.pp, a.batch // m, v))
    rows = []
    print(f"| micro-batches m | chunks v | step, pp 1 (s) | step, pp {a.pp} (s) | bubble measured | (p-1)/(mv+p-1) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for m in ms:
        t1 = statistics.median(runs[m]["t1"])
        for v in vs:
            if v not in runs[m]:
                continue
            tp = statistics.median(runs[m][v])
            measured = 1 - t1 / (a.pp * tp)
            expected = (a.pp - 1) / (m * v + a.pp - 1)
            rows.append({"m": m, "v": v, "t1_s": t1, "tp_s": tp, "bubble": measured, "expected": expected,
                         "t1_runs": runs[m]["t1"], "tp_runs": runs[m][v]})
            print(f"| {m} | {v} | {t1:.4f} | {tp:.4f} | {measured:.3f} | {expected:.3f} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"pp": a.pp, "batch": a.batch, "model": MODEL, "load_after": os.getloadavg(),
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
