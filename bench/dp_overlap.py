#!/usr/bin/env python3
"""How much of the data-parallel gradient reduction `train --dp-bucket-mb` hides behind backward.

dp 2, one rank on each of two simulated hosts (scripts/hosts.sh: network namespaces, one core
each, a 1 Gbit/s link), `--backend mpi`; an 8-layer Llama (hidden 384, 6 / 2 heads, ffn 1024,
13.7M parameters: 55 MB of f32 gradients), seq 256, batch 8. For each layout and bucket size
(0: one all-reduce per tensor after backward) it reads `train --json`:
  - exposed_s: seconds of the step spent on the reduction after backward returned (all of it
    without buckets; waiting for the buckets still in flight with them);
  - bucket_s: seconds the communication thread spent reducing (overlapped with backward, but for
    what is exposed);
  - hidden: 1 - exposed_s / (exposed_s without buckets), both from this run.
World rank 0's values; medians over the steps after the first two and over --rounds rounds, the
layouts interleaved within each round. Only the last micro-batch's backward can overlap (the
gradients are final then), so the layouts differ in micro-batches per rank; with --zero 1 the
buckets are reduce-scattered instead of all-reduced.

Usage (root: the simulated hosts are network namespaces):
  python3 bench/dp_overlap.py [--bin build/bin/tensorpar] [--steps 7] [--rounds 3] [--out F]
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
# (layout, --micro-batch, extra flags, bucket sizes)
LAYOUTS = [("1 micro-batch per rank", "4", [], ["0", "1", "4", "25"]),
           ("2 micro-batches per rank", "2", [], ["0", "1", "4", "25"]),
           ("ZeRO-1, 1 micro-batch per rank", "4", ["--zero", "1"], ["0", "4"])]


def hosts(rate):
    p = subprocess.run(["bash", os.path.join(REPO, "scripts/hosts.sh"), "up", "2", "--rate", rate, "--split-cores",
                        "--name", "tpdp"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"scripts/hosts.sh up failed (root and network namespaces are needed):\n{p.stderr}")
    return p.stdout.strip().splitlines()[-1].split()


def one_run(a, mpirun, micro, flags, bucket):
    cmd = ["mpirun", *mpirun, "-np", "2", a.bin, "train", *MODEL, "--vocab-from", TOKENIZER, "--data", DATA,
           "--batch", "8", "--micro-batch", micro, "--steps", str(a.steps), "--lr", "1e-3",
           "--threads-per-rank", "1", "--dp", "2", "--backend", "mpi", "--dp-bucket-mb", bucket, "--json", *flags]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    steps = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    steps = [s for s in steps if "step" in s][2:]
    med = statistics.median
    return {"step_ms": med(s["ms_per_step"] for s in steps),
            "exposed_ms": 1000 * med(s["dp_reduce"]["exposed_s"] for s in steps),
            "bucket_ms": 1000 * med(s["dp_reduce"]["bucket_s"] for s in steps),
            "buckets": steps[-1]["dp_reduce"]["buckets"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "build/bin/tensorpar"))
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    mpirun = hosts(a.rate)
    try:
        runs = {(m, b): [] for m, _, _, buckets in LAYOUTS for b in buckets}
        for _ in range(a.rounds):
            for m, micro, flags, buckets in LAYOUTS:
                for b in buckets:
                    runs[(m, b)].append(one_run(a, mpirun, micro, flags, b))
    finally:
        subprocess.run(["bash", os.path.join(REPO, "scripts/hosts.sh"), "down", "--name", "tpdp"], capture_output=True)
    print(f"dp 2 over two simulated hosts ({a.rate} link, one core each), --backend mpi; world rank 0, "
          f"ms, medians of steps 3-{a.steps} and {a.rounds} rounds\n")
    print("| layout | --dp-bucket-mb | buckets | step | exposed | bucket thread | hidden |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for m, _, _, buckets in LAYOUTS:
        base = None
        for b in buckets:
            row = {"layout": m, "dp_bucket_mb": float(b),
                   **{k: statistics.median(r[k] for r in runs[(m, b)]) for k in runs[(m, b)][0]}}
            if base is None:
                base = row["exposed_ms"]
            row["hidden"] = 1 - row["exposed_ms"] / base
            rows.append(row)
            print(f"| {m} | {b} | {row['buckets']:.0f} | {row['step_ms']:.0f} | {row['exposed_ms']:.0f} | "
                  f"{row['bucket_ms']:.0f} | {100 * row['hidden']:.0f}% |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"rate": a.rate, "rounds": a.rounds, "steps": a.steps, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
