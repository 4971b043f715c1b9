#!/usr/bin/env python3
"""The mission's rule measured on simulated hosts (scripts/hosts.sh): tensor parallelism inside a
host, pipeline and data parallelism across. For each link rate, on two hosts:

  all-reduce: `tensorpar bench comm` sweeps for 2 ranks inside one host, 2 ranks on two hosts
      (one each), and 2 x 2 ranks with the flat MPI backend and with the two-level one (hybrid);
  training step time of one model at 4 ranks: TP 4 across both hosts, TP 2 inside each host with
      DP 2 or PP 2 across, and TP 2 across the hosts with DP 2 inside (flat MPI, ranks placed
      round robin so that each TP pair spans the hosts);
  decode: `tensorpar generate` of the default model at TP 2 inside a host, TP 2 across two hosts
      and TP 4 over 2 x 2 (flat and two-level).

Also the same runs in one process (threads backend) as the shared-memory reference. Medians of
--repeats runs for training and decode. Each host gets its own cores (hosts.sh --split-cores: on
a 2-core machine one each, so 4 ranks run two to a core, alike for every 4-rank layout), except
for the 2 ranks inside one host, which get all of them.

The planner's predictions sit beside the training times: `tensorpar plan --calibrate` measures
one core (f32 GEMM, memory, a shared-memory all-reduce); each rate's cluster file has 2 nodes of
2 devices, each device half a core (two ranks per core), the calibrated link inside a node, and
the link rate shared by a host's two ranks between nodes, its latency half of the measured
one-per-host round trip; `tensorpar plan --fix tp=..,pp=..,dp=..,micro_batch=4` for the layouts
the planner can place (it keeps TP groups inside a node first, as the hybrid backend does).

Usage (root, from the repository root, after the build and tools/fetch_model.sh):
  python3 bench/multihost_bench.py --rates 10gbit,1gbit,100mbit --repeats 3 \
      --out docs/results/multihost.json --plot docs/img/multihost.png
"""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "bin", "tensorpar")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
MPIRUN = shutil.which("mpirun") or "mpirun"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           TENSORPAR_COMM_TIMEOUT="300")


def run(cmd, timeout=900):
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    return p.stdout


def hosts_up(rate, split):
    cmd = ["bash", os.path.join(ROOT, "scripts", "hosts.sh"), "up", "2", "--name", "mhb", "--slots", "2"]
    if rate != "unlimited":
        cmd += ["--rate", rate]
    if split:
        cmd += ["--split-cores"]
    return run(cmd).strip().splitlines()[-1].split()


def hosts_down():
    subprocess.run(["bash", os.path.join(ROOT, "scripts", "hosts.sh"), "down", "--name", "mhb"],
                   env=ENV, capture_output=True)


def comm_sweep(prefix, backend):
    out = run(prefix + [BIN, "bench", "comm", "--backend", backend, "--op", "all_reduce",
                        "--min-bytes", "8", "--max-bytes", "16M", "--seconds-per-size", "0.05",
                        "--threads-per-rank", "1", "--json"])
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def write_corpus(path):
    with open(path, "w") as f:
        for i in range(1, 2001):
            f.write(f"Line {i}: the quick brown fox jumps over {i * 7 % 13} lazy dogs; def f(x): return x + {i}\n")


def train_ms(prefix, backend, layout, corpus, steps):
    tp, dp, pp = layout
    out = run(prefix + [BIN, "train", "--arch", "llama"] + TRAIN_SHAPE + [
                        "--seq", str(SEQ), "--batch", str(BATCH), "--micro-batch", str(MICRO),
                        "--vocab-from", os.path.join(ROOT, "tests/fixtures/tokenizer/gpt2_trained.tokenizer.json"),
                        "--data", corpus, "--steps", str(steps), "--lr", "1e-3", "--warmup", "1",
                        "--threads-per-rank", "1", "--json", "--backend", backend,
                        "--tp", str(tp), "--dp", str(dp), "--pp", str(pp)])
    recs = [json.loads(line) for line in out.splitlines() if line.startswith("{") and '"ms_per_step"' in line]
    return statistics.median(r["ms_per_step"] for r in recs[2:])  # the first two warm up


def decode_tok_s(prefix, backend, tp):
    out = run(prefix + [BIN, "generate", "-m", MODEL, "-p", "The history of the printing press", "-n", "48",
                        "--threads-per-rank", "1", "--json", "--backend", backend,
                        "--tp", str(tp)])
    return json.loads(out.strip().split("\n")[-1])["decode_tok_s"]


TRAIN_SHAPE = ["--layers", "4", "--hidden", "256", "--heads", "8", "--kv-heads", "4", "--ffn", "1024"]
BATCH, SEQ, MICRO = 16, 256, 4


def predicted_train_ms(calibration, rate, one_per_host_comm, work):
    """The planner's step time for the hybrid layouts on two simulated hosts at this link rate."""
    m = re.fullmatch(r"(\d+)(k|m|g)bit", rate)
    bits = int(m.group(1)) * {"k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
    cal = json.load(open(calibration))
    small_us = min(x["time_us"] for x in one_per_host_comm)
    cluster = {
        "name": f"two simulated hosts, {rate}", "nodes": 2, "devices_per_node": 2,
        "device": dict(cal["device"], tflops=cal["device"]["tflops"] / 2,
                       memory_bandwidth_gbps=cal["device"]["memory_bandwidth_gbps"] / 2),
        "intra_node": cal["intra_node"],
        "inter_node": {"bandwidth_gbps": bits / 8 / 2 / 1e9, "latency_us": small_us / 2, "links": 1},
        "efficiency": cal["efficiency"],
    }
    path = os.path.join(work, f"cluster_{rate}.json")
    json.dump(cluster, open(path, "w"))
    out = {}
    for label, (tp, dp, pp) in {"TP 4 across the hosts (hybrid)": (4, 1, 1),
                                "TP 2 inside, DP 2 across (hybrid)": (2, 2, 1),
                                "TP 2 inside, PP 2 across (hybrid)": (2, 1, 2)}.items():
        plan = json.loads(run([BIN, "plan"] + TRAIN_SHAPE + ["--vocab", "1503", "--tied", "--cluster", path,
                                                              "--mode", "train", "--global-batch", str(BATCH),
                                                              "--seq", str(SEQ), "--precision", "f32", "--fix",
                                                              f"tp={tp},pp={pp},dp={dp},micro_batch={MICRO}",
                                                              "--json"]))["plans"][0]
        out[label] = round(plan["step_time_s"] * 1000, 1)
    return out


def median_of(repeats, fn):
    return statistics.median(fn() for _ in range(repeats))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="10gbit,1gbit,100mbit")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", required=True)
    ap.add_argument("--plot")
    ap.add_argument("--replan", action="store_true",
                    help="only recompute the planner's predictions of the measured --out (same calibration)")
    a = ap.parse_args()
    if a.replan:
        result = json.load(open(a.out))
        work = tempfile.mkdtemp()
        calibration = os.path.join(work, "calibration.json")
        json.dump(result["calibration"], open(calibration, "w"))
        for rate, r in result["rates"].items():
            r["predicted_train_ms"] = predicted_train_ms(calibration, rate, r["comm"]["2 ranks, one per host (mpi)"], work)
            print(rate, r["predicted_train_ms"], "measured", r["train_ms"])
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
        shutil.rmtree(work, ignore_errors=True)
        return
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    work = tempfile.mkdtemp()
    corpus = os.path.join(work, "corpus.txt")
    write_corpus(corpus)
    started = time.time()
    result = {"bench": "multihost", "machine": platform.processor() or platform.machine(),
              "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
              "cores": os.cpu_count(), "mpirun": run([MPIRUN, "--version"]).splitlines()[0],
              "command": " ".join(["python3", "bench/multihost_bench.py"] + sys.argv[1:]),
              "repeats": a.repeats, "reference": {}, "rates": {}}
    # One process, shared memory: the reference.
    calibration = os.path.join(work, "calibration.json")
    run([BIN, "plan", "--calibrate", calibration])
    result["calibration"] = json.load(open(calibration))
    ref = result["reference"]
    ref["comm_2_ranks_threads"] = comm_sweep([], "threads")
    ref["comm_4_ranks_threads"] = run([BIN, "bench", "comm", "--backend", "threads", "--ranks", "4", "--op",
                                        "all_reduce", "--min-bytes", "8", "--max-bytes", "16M",
                                        "--seconds-per-size", "0.05", "--threads-per-rank", "1", "--json"])
    ref["comm_4_ranks_threads"] = [json.loads(l) for l in ref["comm_4_ranks_threads"].splitlines() if l.startswith("{")]
    ref["train_ms"] = {f"tp{tp} dp{dp} pp{pp}": median_of(a.repeats, lambda l=(tp, dp, pp): train_ms([], "threads", l, corpus, a.steps))
                       for tp, dp, pp in [(4, 1, 1), (2, 2, 1), (2, 1, 2)]}
    ref["decode_tok_s"] = {f"tp{tp}": median_of(a.repeats, lambda t=tp: decode_tok_s([], "threads", t)) for tp in (2, 4)}
    try:
        for rate in a.rates.split(","):
            r = result["rates"][rate] = {"comm": {}, "train_ms": {}, "decode_tok_s": {}}
            # Each host its own cores (one of two on a 2-core machine).
            place = [MPIRUN] + hosts_up(rate, split=True)
            r["comm"]["2 ranks, one per host (mpi)"] = comm_sweep(place + ["-np", "2", "--map-by", "node"], "mpi")
            r["comm"]["2 x 2 ranks, flat (mpi)"] = comm_sweep(place + ["-np", "4"], "mpi")
            r["comm"]["2 x 2 ranks, two-level (hybrid)"] = comm_sweep(place + ["-np", "4"], "hybrid")
            r["decode_tok_s"]["tp2 across 2 hosts (mpi)"] = median_of(
                a.repeats, lambda: decode_tok_s(place + ["-np", "2", "--map-by", "node"], "mpi", 2))
            r["decode_tok_s"]["tp4 over 2 x 2 (mpi, flat)"] = median_of(
                a.repeats, lambda: decode_tok_s(place + ["-np", "4"], "mpi", 4))
            r["decode_tok_s"]["tp4 over 2 x 2 (hybrid)"] = median_of(
                a.repeats, lambda: decode_tok_s(place + ["-np", "4"], "hybrid", 4))
            layouts = {
                "TP 4 across the hosts (hybrid)": ([], "hybrid", (4, 1, 1)),
                "TP 2 inside, DP 2 across (hybrid)": ([], "hybrid", (2, 2, 1)),
                "TP 2 inside, PP 2 across (hybrid)": ([], "hybrid", (2, 1, 2)),
                "TP 2 across, DP 2 inside (mpi, round robin)": (["--map-by", "node"], "mpi", (2, 2, 1)),
            }
            for label, (extra, backend, layout) in layouts.items():
                r["train_ms"][label] = median_of(
                    a.repeats, lambda: train_ms(place + extra + ["-np", "4"], backend, layout, corpus, a.steps))
                print(rate, label, r["train_ms"][label], flush=True)
            hosts_down()
            # Two ranks inside one host that has both cores.
            place = [MPIRUN] + hosts_up(rate, split=False)
            r["comm"]["2 ranks inside one host (mpi)"] = comm_sweep(place + ["-np", "2"], "mpi")
            r["decode_tok_s"]["tp2 inside 1 host (mpi)"] = median_of(
                a.repeats, lambda: decode_tok_s(place + ["-np", "2"], "mpi", 2))
            hosts_down()
            r["predicted_train_ms"] = predicted_train_ms(calibration, rate, r["comm"]["2 ranks, one per host (mpi)"], work)
            print(json.dumps({rate: {"train_ms": r["train_ms"], "predicted_train_ms": r["predicted_train_ms"],
                                     "decode_tok_s": r["decode_tok_s"]}}), flush=True)
    finally:
        hosts_down()
        shutil.rmtree(work, ignore_errors=True)
    result["wall_s"] = round(time.time() - started, 1)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    if a.plot:
        plot(result, a.plot)


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rates = list(result["rates"])
    fig, axes = plt.subplots(1, len(rates) + 2, figsize=(5 * (len(rates) + 2), 4.2))
    for ax, rate in zip(axes, rates):
        for label, recs in result["rates"][rate]["comm"].items():
            ax.loglog([x["bytes"] for x in recs], [x["time_us"] for x in recs], marker=".", label=label)
        ref = result["reference"]["comm_4_ranks_threads"]
        ax.loglog([x["bytes"] for x in ref], [x["time_us"] for x in ref], "k--", label="4 ranks, one process (threads)")
        ax.set_title(f"all-reduce, links {rate}")
        ax.set_xlabel("bytes")
        ax.set_ylabel("time (us)")
        ax.legend(fontsize=7)
    ax = axes[-2]
    labels = list(result["rates"][rates[0]]["train_ms"])
    width = 0.8 / len(rates)
    for i, rate in enumerate(rates):
        ax.bar([j + i * width for j in range(len(labels))], [result["rates"][rate]["train_ms"][l] for l in labels],
               width, label=rate)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(labels))])
    ax.set_xticklabels([re.sub(r" \(.*\)", "", l).replace(", ", "\n") for l in labels], fontsize=7)
    ax.set_ylabel("ms per training step")
    ax.set_title("training, 4 ranks on 2 hosts")
    ax.legend(fontsize=7)
    ax = axes[-1]
    labels = list(result["rates"][rates[0]]["decode_tok_s"])
    for i, rate in enumerate(rates):
        ax.bar([j + i * width for j in range(len(labels))],
               [result["rates"][rate]["decode_tok_s"][l] for l in labels], width, label=rate)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(labels))])
    ax.set_xticklabels([l.replace(" (", "\n(") for l in labels], fontsize=7)
    ax.set_ylabel("decode tokens/s")
    ax.set_title("decode, SmolLM2-135M Q4_1")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    main()
