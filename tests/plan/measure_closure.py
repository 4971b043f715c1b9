#!/usr/bin/env python3
"""Closure of the planner on this machine: predicted vs measured tensorpar training step time
and peak memory for every (tp, pp, dp) on 1-4 ranks (one thread each; more ranks than cores
time-slice them), and decode steps of the default SmolLM2 model at tp 1 and 2, after
`tensorpar plan --calibrate` for each rank count. Prints a Markdown table (docs/planner.md)
and draws docs/img/planner_closure.png (predicted against measured; standard library only).

Usage: python3 tests/plan/measure_closure.py --plan-bin build-plan/bin/tensorpar \
           --run-bin build/bin/tensorpar [--rounds 3] [--png docs/img/planner_closure.png] \
           [--save R.json] [--load R.json --cluster R.json.cluster{n}.json]
Not a ctest: it measures wall time on a shared machine.
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import zlib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENIZER = os.path.join(REPO, "tests/fixtures/tokenizer/gpt2_trained.tokenizer.json")
DATA = "/usr/share/games/fortunes/computers"
GGUF = os.path.join(REPO, "models/SmolLM2-135M-Instruct.Q4_1.gguf")
MODEL = dict(layers=6, hidden=384, heads=6, kv_heads=2, ffn=1024, seq=128, batch=12, vocab=1503)
RED, BLUE = [200, 30, 30], [30, 60, 200]  # plot: times (s), memory (GiB)
PROMPT = "The quick brown fox jumps over the lazy dog. " * 4


def run(cmd):
    """Runs cmd; returns (stdout, stderr); exits with its error output when it fails."""
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p.stdout, p.stderr


def run_rss(cmd):
    """Runs cmd under /usr/bin/time -f %M; returns (stdout, peak RSS bytes)."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as f:
        p = subprocess.run(["/usr/bin/time", "-o", f.name, "-f", "%M"] + cmd, capture_output=True,
                           text=True)
        if p.returncode != 0:
            sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
        rss_kib = int(f.read().strip().splitlines()[-1])
    return p.stdout, rss_kib * 1024


# Every (tp, pp, dp) of 1-4 ranks with the micro-batch: the whole batch per DP rank, except
# through a pipeline (micro-batches of 2, so the stages overlap).
LAYOUTS = [(tp, pp, dp, 2 if pp > 1 else MODEL["batch"] // dp)
           for n in (1, 2, 3, 4) for tp in (1, 2, 3, 4) for pp in (1, 2, 3, 4) for dp in (1, 2, 3, 4)
           if tp * pp * dp == n]


def measure_train(a, tp, pp, dp, mb):
    m = MODEL
    cmd = [a.run_bin, "train", "--arch", "llama", "--layers", str(m["layers"]), "--hidden",
           str(m["hidden"]), "--heads", str(m["heads"]), "--kv-heads", str(m["kv_heads"]), "--ffn",
           str(m["ffn"]), "--seq", str(m["seq"]), "--vocab-from", TOKENIZER, "--data", DATA,
           "--batch", str(m["batch"]), "--micro-batch", str(mb), "--steps", str(a.steps), "--lr", "1e-3",
           "--tp", str(tp), "--pp", str(pp), "--dp", str(dp), "--threads-per-rank", "1", "--json"]
    out, rss = run_rss(cmd)
    steps = [json.loads(l) for l in out.splitlines() if l.startswith("{") and '"step"' in l]
    tok = [s["tokens_per_s"] for s in steps[2:]]  # after 2 warm-up steps
    return m["batch"] * m["seq"] / statistics.median(tok), rss


def predict_train(a, cluster, tp, pp, dp, mb):
    m = MODEL
    cmd = [a.plan_bin, "plan", "--layers", str(m["layers"]), "--hidden", str(m["hidden"]),
           "--heads", str(m["heads"]), "--kv-heads", str(m["kv_heads"]), "--ffn", str(m["ffn"]),
           "--vocab", str(m["vocab"]), "--tied", "--cluster", cluster, "--devices", str(tp * pp * dp),
           "--global-batch", str(m["batch"]), "--seq", str(m["seq"]), "--precision", "f32",
           "--fix", f"tp={tp},pp={pp},dp={dp},micro_batch={mb},recompute=none",
           "--json"]
    plan = json.loads(run(cmd)[0])["plans"][0]
    # The process's memory: every rank's, each stage's own figure.
    return plan["step_time_s"], sum(plan["memory_gib_per_stage"]) * 2**30 * tp * dp


def measure_decode(a, tp):
    """One decode step of SmolLM2 at one sequence (`bench decode`: steady state after a prompt of
    --context tokens, no end-of-sequence stop); returns (seconds, prompt tokens, output tokens)."""
    steps, repeats = 16, max(1, a.tokens // 16)
    cmd = [a.run_bin, "bench", "decode", "--model", GGUF, "--tp", str(tp), "--threads-per-rank", "1",
           "--rows", "1", "--context", str(a.context), "--steps", str(steps), "--repeats", str(repeats),
           "--json"]
    out, _ = run(cmd)
    j = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
    return j["ms_per_step"] * 1e-3, a.context, steps * repeats


def predict_decode(a, cluster, tp, prompt_tokens, output_tokens):
    cmd = [a.plan_bin, "plan", "--model", GGUF, "--mode", "serve", "--cluster", cluster,
           "--devices", str(tp), "--fix", f"tp={tp},pp=1", "--concurrency", "1",
           "--prompt-tokens", str(prompt_tokens), "--output-tokens", str(output_tokens), "--json"]
    plan = json.loads(run(cmd)[0])["plans"][0]
    return plan["itl_ms"] * 1e-3


def png(path, points, w=480, h=480):
    """Predicted (y) against measured (x), log-log: y = x and the +-15% band; one dot a point
    (measured, predicted, rgb): times red, memory blue."""
    import math
    lo = min(min(p[:2]) for p in points) / 1.5
    hi = max(max(p[:2]) for p in points) * 1.5
    px = lambda v: int((math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo)) * (w - 41)) + 20
    img = [[255] * (w * 3) for _ in range(h)]

    def dot(x, y, rgb, r=0):
        for dx in range(-r, r + 1):
            for dy in range(-r, r + 1):
                if 0 <= x + dx < w and 0 <= y + dy < h:
                    img[h - 1 - (y + dy)][3 * (x + dx):3 * (x + dx) + 3] = rgb

    for i in range(2000):
        v = lo * (hi / lo) ** (i / 1999)
        dot(px(v), px(v), [0, 0, 0])
        dot(px(v), px(min(v * 1.15, hi)), [170, 170, 170])
        dot(px(v), px(max(v / 1.15, lo)), [170, 170, 170])
    for x in range(20, w - 20):
        dot(x, 20, [0, 0, 0])
    for y in range(20, h - 20):
        dot(20, y, [0, 0, 0])
    for measured, predicted, rgb in points:
        dot(px(measured), px(predicted), rgb, 4)
    raw = b"".join(b"\x00" + bytes(row) for row in img)
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan-bin", default=os.path.join(REPO, "build/bin/tensorpar"))
    ap.add_argument("--run-bin", default=os.path.join(REPO, "build/bin/tensorpar"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64, help="decode steps timed per round")
    ap.add_argument("--context", type=int, default=48, help="decode's prompt tokens")
    ap.add_argument("--cluster", help="use these cluster files instead of calibrating: a path "
                    "with {n} for the rank count (2, 3, 4), as --save writes them")
    ap.add_argument("--png")
    ap.add_argument("--save", help="write the measurements (and the cluster) to this JSON file")
    ap.add_argument("--load", help="predict only, against measurements saved with --save")
    a = ap.parse_args()
    # One calibration per rank count: the all-reduce and the shared memory bus depend on it.
    clusters = {}
    for n in (2, 3, 4):
        if a.cluster:
            clusters[n] = a.cluster.replace("{n}", str(n))
        else:
            clusters[n] = os.path.join(tempfile.mkdtemp(), f"this-machine-{n}.json")
            print(f"calibrating {n} ranks (bench gemm, bench comm)", file=sys.stderr)
            run([a.plan_bin, "plan", "--calibrate", clusters[n], "--devices", str(n)])
        print(f"cluster {n}: {json.dumps(json.load(open(clusters[n])))}", file=sys.stderr)
        if a.save:
            json.dump(json.load(open(clusters[n])), open(f"{a.save}.cluster{n}.json", "w"), indent=1)
    clusters[1] = clusters[2]  # --devices 1 below
    print(f"load average before: {os.getloadavg()}", file=sys.stderr)
    if a.load:
        measured = json.load(open(a.load))
    else:
        measured = {"train": {}, "decode": {}}
        for tp, pp, dp, mb in LAYOUTS:
            measured["train"][f"{tp},{pp},{dp},{mb}"] = [measure_train(a, tp, pp, dp, mb) for _ in range(a.rounds)]
        for tp in (1, 2):
            runs = [measure_decode(a, tp) for _ in range(a.rounds)]
            measured["decode"][str(tp)] = [list(x) for x in runs]
        if a.save:
            json.dump(measured, open(a.save, "w"), indent=1)
    rows, points = [], []
    for key, meas in measured["train"].items():
        tp, pp, dp, mb = map(int, key.split(","))
        step = statistics.median(x[0] for x in meas)
        rss = statistics.median(x[1] for x in meas)
        pred_step, pred_mem = predict_train(a, clusters[tp * pp * dp], tp, pp, dp, mb)
        name = f"tp {tp} pp {pp} dp {dp}, micro-batch {mb}"
        rows.append((f"train step, {name}", step, pred_step, "s", [round(x[0], 4) for x in meas]))
        rows.append((f"train peak RSS (process), {name}", rss / 2**20, pred_mem / 2**20,
                     "MiB", [round(x[1] / 2**20) for x in meas]))
        points.append((step, pred_step, RED))
        points.append((rss / 2**30, pred_mem / 2**30, BLUE))
    for key, meas in measured["decode"].items():
        tp = int(key)
        itl = statistics.median(x[0] for x in meas)
        # Saves before bench decode (runs A-E: `generate`, ~10 tokens to its end of sequence)
        # hold [seconds, prompt tokens]; their output tokens were --tokens 32.
        pred = predict_decode(a, clusters[max(2, tp)], tp, meas[0][1],
                              meas[0][2] if len(meas[0]) > 2 else 32)
        rows.append((f"decode ITL, SmolLM2 Q4_1, tp {tp}", itl * 1e3, pred * 1e3, "ms",
                     [round(x[0] * 1e3, 2) for x in meas]))
        points.append((itl, pred, RED))
    print(f"load average after: {os.getloadavg()}", file=sys.stderr)
    print("| quantity | measured | predicted | error | runs |")
    print("| --- | --- | --- | --- | --- |")
    for name, meas, pred, unit, runs in rows:
        print(f"| {name} | {meas:.4g} {unit} | {pred:.4g} {unit} | {100 * (pred - meas) / meas:+.1f}% | {runs} |")
    if a.png:
        png(a.png, points)


if __name__ == "__main__":
    main()
