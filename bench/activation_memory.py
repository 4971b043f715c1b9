#!/usr/bin/env python3
"""Memory per rank of `tensorpar train` with each memory feature on and off, beside the planner's
analytic model (docs/planner.md: Korthikanti et al. 2022 generalised to GQA and gated MLPs, at the
4 bytes per activation tensorpar trains with).

For each layout (tp, pp, sequence parallelism, recomputation, ZeRO-1) it runs a few training steps
with --json and reads, on world rank 0 (TP rank 0 of the first stage, the stage that holds the
most micro-batches in flight under 1F1B):
  - activation_bytes: what the rank's forward keeps for backward plus the step's scratch, over
    every micro-batch it holds (CausalLM::activation_bytes; buffers only grow, so it is the peak);
  - params+grads+AdamW: the train log's per-rank training state (train_memory_report);
and asks `tensorpar plan --fix ...` for the same plan's predicted activations and weights +
gradients + optimizer state. Prints a Markdown table and writes --out JSON. Memory is counted, not
timed: the numbers do not depend on the machine's load.

Usage: python3 bench/activation_memory.py [--bin build/bin/tensorpar] [--out F]
"""
import argparse
import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER = os.path.join(REPO, "tests/fixtures/tokenizer/gpt2_trained.tokenizer.json")
DATA = "/usr/share/games/fortunes/computers"
# A 12.6M-parameter Llama (vocab 1503): long sequences, where the activations that sequence
# parallelism shards (norms, residuals: (s, h) per layer) are a visible part of the total.
LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, SEQ = 8, 384, 6, 2, 1024, 512
BATCH, MICRO = 8, 2
VOCAB = 1503
MIB = 1024 * 1024

# (name, tp, pp, dp, sequence parallel, recomputed layers, zero)
LAYOUTS = [
    ("tp 1", 1, 1, 1, False, 0, 0),
    ("tp 2", 2, 1, 1, False, 0, 0),
    ("tp 2 + SP", 2, 1, 1, True, 0, 0),
    ("tp 2 + recompute", 2, 1, 1, False, LAYERS, 0),
    ("tp 2 + SP + recompute", 2, 1, 1, True, LAYERS, 0),
    ("tp 4", 4, 1, 1, False, 0, 0),
    ("tp 4 + SP", 4, 1, 1, True, 0, 0),
    ("tp 2 x pp 2", 2, 2, 1, False, 0, 0),
    ("tp 2 x pp 2 + SP", 2, 2, 1, True, 0, 0),
    ("tp 2 x dp 2", 2, 1, 2, False, 0, 0),
    ("tp 2 x dp 2 + ZeRO-1", 2, 1, 2, False, 0, 1),
]


def measure(a, tp, pp, dp, sp, recompute, zero):
    cmd = [a.bin, "train", "--arch", "llama", "--layers", str(LAYERS), "--hidden", str(HIDDEN),
           "--heads", str(HEADS), "--kv-heads", str(KV_HEADS), "--ffn", str(FFN), "--seq", str(SEQ),
           "--vocab-from", TOKENIZER, "--data", DATA, "--batch", str(BATCH), "--micro-batch", str(MICRO),
           "--steps", "2", "--lr", "1e-3", "--tp", str(tp), "--pp", str(pp), "--dp", str(dp),
           "--zero", str(zero), "--recompute-layers", str(recompute), "--threads-per-rank", "1", "--json"]
    if sp:
        cmd.append("--sequence-parallel")
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    steps = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    state = re.search(r"params\+grads\+AdamW[^:]*: ([0-9.]+)", p.stderr)
    if not steps or not state:
        sys.exit(f"no step log or memory line from: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return steps[-1]["activation_bytes"] / MIB, float(state.group(1))


def predict(a, tp, pp, dp, sp, recompute, zero):
    fix = (f"tp={tp},pp={pp},dp={dp},micro_batch={MICRO},recompute={'full' if recompute else 'none'},"
           f"sp={'on' if sp else 'off'},interleave=1,zero={zero}")
    cmd = [a.bin, "plan", "--layers", str(LAYERS), "--hidden", str(HIDDEN), "--heads", str(HEADS),
           "--kv-heads", str(KV_HEADS), "--ffn", str(FFN), "--vocab", str(VOCAB), "--devices", str(tp * pp * dp),
           "--global-batch", str(BATCH), "--seq", str(SEQ), "--precision", "f32", "--fix", fix, "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    mem = json.loads(p.stdout)["plans"][0]["breakdown"]["memory_gib"]
    return mem["activations"] * 1024, (mem["weights"] + mem["grads"] + mem["optimizer"]) * 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "build/bin/tensorpar"))
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    rows = []
    print(f"Llama {LAYERS} layers, hidden {HIDDEN}, {HEADS}/{KV_HEADS} heads, ffn {FFN}, vocab {VOCAB}; "
          f"seq {SEQ}, micro-batch {MICRO}, batch {BATCH}; f32; world rank 0, MiB\n")
    print("| layout | activations | planner | ratio | params+grads+AdamW | planner |")
    print("|---|---|---|---|---|---|")
    for name, *layout in LAYOUTS:
        act, state = measure(a, *layout)
        p_act, p_state = predict(a, *layout)
        rows.append({"layout": name, "tp": layout[0], "pp": layout[1], "dp": layout[2],
                     "sequence_parallel": layout[3], "recompute_layers": layout[4], "zero": layout[5],
                     "activations_mib": act, "planner_activations_mib": p_act,
                     "state_mib": state, "planner_state_mib": p_state})
        print(f"| {name} | {act:.1f} | {p_act:.1f} | {act / p_act:.2f} | {state:.1f} | {p_state:.1f} |", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"model": {"layers": LAYERS, "hidden": HIDDEN, "heads": HEADS, "kv_heads": KV_HEADS,
                                 "ffn": FFN, "vocab": VOCAB, "seq": SEQ, "micro_batch": MICRO, "batch": BATCH},
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
