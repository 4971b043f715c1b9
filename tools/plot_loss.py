#!/usr/bin/env python3
"""Draws loss curves from `tensorpar train --json` logs (one JSON object per line with keys
step, loss, and val_loss when evaluated) into a PNG; one curve (+ validation points) per log.

Usage: PY=$(tools/venv.sh) && "$PY" tools/plot_loss.py run.jsonl [more.jsonl ...] --out loss.png
       [--label NAME ...] [--title TEXT] [--smooth N]
"""
import argparse
import json
import sys

try:
    import matplotlib
except ImportError:
    sys.exit("tools/plot_loss.py needs matplotlib (tools/requirements.txt): "
             'PY=$(tools/venv.sh) && "$PY" tools/plot_loss.py ...')

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_log(path):
    steps, losses, vsteps, vlosses = [], [], [], []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue  # stderr lines or other text mixed in
            j = json.loads(line)
            if "step" not in j or "loss" not in j:
                continue
            steps.append(j["step"])
            losses.append(j["loss"])
            if "val_loss" in j:
                vsteps.append(j["step"])
                vlosses.append(j["val_loss"])
    if not steps:
        sys.exit(f"plot_loss: {path} has no lines with 'step' and 'loss'")
    return steps, losses, vsteps, vlosses


def smooth(values, n):
    if n <= 1:
        return values
    out, acc = [], []
    for v in values:
        acc.append(v)
        if len(acc) > n:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--label", action="append", default=[])
    ap.add_argument("--title", default="tensorpar train")
    ap.add_argument("--smooth", type=int, default=1, help="moving average over N steps (train loss)")
    a = ap.parse_args()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    for i, path in enumerate(a.logs):
        label = a.label[i] if i < len(a.label) else path
        steps, losses, vsteps, vlosses = read_log(path)
        line, = ax.plot(steps, smooth(losses, a.smooth), lw=1.4, label=f"{label} train")
        if vsteps:
            ax.plot(vsteps, vlosses, "o--", color=line.get_color(), ms=4, lw=1, label=f"{label} validation")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss (nats/token)")
    ax.set_title(a.title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.out)
    print(f"plot_loss: wrote {a.out}")


if __name__ == "__main__":
    main()
