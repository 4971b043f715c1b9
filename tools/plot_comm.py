#!/usr/bin/env python3
"""Plot busbw against message size from `tensorpar bench comm --json` outputs.

Each input file holds one JSON object per line (the bench's --json output); one line is drawn
per (backend, op, ranks). When several runs of a series are given, each size shows the run
with the median time. Used for docs/BENCHMARKS.md:

    python3 tools/plot_comm.py --out docs/comm_allreduce_2ranks.png threads.jsonl mpi.jsonl

matplotlib lives in the tools venv (<repo>/.venv), created on demand; never needed to build or
run the engine.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, ".venv")


def ensure_matplotlib():
    try:
        import matplotlib  # noqa: F401
        return
    except ImportError:
        pass
    py = os.path.join(VENV, "bin", "python")
    if os.path.abspath(sys.executable) == os.path.abspath(py):
        subprocess.check_call([py, "-m", "pip", "install", "--quiet", "matplotlib"])
        return
    if not os.path.exists(py):
        subprocess.check_call([sys.executable, "-m", "venv", VENV])
    probe = subprocess.run([py, "-c", "import matplotlib"], capture_output=True)
    if probe.returncode != 0:
        subprocess.check_call([py, "-m", "pip", "install", "--quiet", "matplotlib"])
    os.execv(py, [py] + sys.argv)


def load(paths):
    series = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue  # mpirun and other chatter
                row = json.loads(line)
                if row.get("bench") != "comm":
                    continue
                key = (row["backend"], row["op"], row["ranks"])
                series.setdefault(key, []).append(row)
    # Several runs of the same series: keep, per size, the run with the median time.
    for key, rows in series.items():
        by_size = {}
        for r in rows:
            by_size.setdefault(r["bytes"], []).append(r)
        series[key] = [sorted(rs, key=lambda r: r["time_us"])[len(rs) // 2]
                       for _, rs in sorted(by_size.items())]
    return series


def size_label(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def print_table(series):
    """One row per size; per series time_us, busbw, mem_eff; then busbw ratios to the first."""
    keys = sorted(series, key=lambda k: (k[0] != "threads", k))
    if not keys:
        sys.exit("plot_comm: no comm bench lines in the inputs")
    by_size = {}
    for k in keys:
        for r in series[k]:
            by_size.setdefault(r["bytes"], {})[k] = r
    head = ["bytes"]
    for k in keys:
        head += [f"{k[0]} us", f"{k[0]} busbw GB/s", f"{k[0]} mem_eff"]
    head += [f"{keys[0][0]} / {k[0]} busbw" for k in keys[1:]]
    print("| " + " | ".join(head) + " |")
    print("|" + "---:|" * len(head))
    for b in sorted(by_size):
        row, cells = by_size[b], [size_label(b)]
        for k in keys:
            r = row.get(k)
            cells += [f"{r['time_us']:.2f}", f"{r['busbw_gbps']:.3f}", f"{r['mem_eff']:.2f}"] if r else ["", "", ""]
        base = row.get(keys[0])
        for k in keys[1:]:
            r = row.get(k)
            cells.append(f"{base['busbw_gbps'] / r['busbw_gbps']:.2f}x" if base and r and r["busbw_gbps"] > 0 else "")
        print("| " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inputs", nargs="+", help="files with `tensorpar bench comm --json` lines")
    ap.add_argument("--out", help="PNG to write")
    ap.add_argument("--table", action="store_true",
                    help="print a markdown table (time, busbw, mem_eff per backend, ratio to the "
                         "first backend's busbw) instead of plotting")
    ap.add_argument("--title", default=None)
    args = ap.parse_args()
    if args.table:
        print_table(load(args.inputs))
        return
    if not args.out:
        sys.exit("plot_comm: --out PNG or --table is required")
    ensure_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = load(args.inputs)
    if not series:
        sys.exit("plot_comm: no comm bench lines in the inputs")
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    for (backend, op, ranks), rows in sorted(series.items()):
        xs = [r["bytes"] for r in rows]
        ys = [r["busbw_gbps"] for r in rows]
        ax.plot(xs, ys, marker="o", markersize=3, label=f"{backend} {op} ({ranks} ranks)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = [x for x in sorted({r["bytes"] for rows in series.values() for r in rows})][::3]
    ax.set_xticks(ticks)
    ax.set_xticklabels([size_label(t) for t in ticks], rotation=45, fontsize=7)
    ax.set_xlabel("message size")
    ax.set_ylabel("busbw (GB/s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(args.title or "tensorpar bench comm: bus bandwidth", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"plot_comm: wrote {args.out}")


if __name__ == "__main__":
    main()
