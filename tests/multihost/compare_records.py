"""Compares two `tensorpar train --json` streams (timing fields, buffer sizes and checkpoint names ignored): the same records, each
number within a relative 1e-5 of the other. Prints whether they agree bit for bit. Exit 1 if not.
With FROM_STEP, only A's records of that step and later (B: a run resumed there).
Usage: compare_records.py NAME A B [FROM_STEP]"""
import json
import math
import sys

name, a_path, b_path = sys.argv[1:4]
a = [json.loads(line) for line in open(a_path) if line.strip()]
b = [json.loads(line) for line in open(b_path) if line.strip()]
# Timings and buffer sizes (a resumed run's buffers grew in another order) are not training state.
IGNORED = {"tokens_per_s", "ms_per_step", "compute_s", "comm_s", "activation_bytes", "checkpoint", "dp_reduce"}
a = [{k: v for k, v in r.items() if k not in IGNORED} for r in a]
b = [{k: v for k, v in r.items() if k not in IGNORED} for r in b]
if len(sys.argv) > 4:
    a = [r for r in a if r.get("step", 0) >= int(sys.argv[4])]
steps = [r for r in a if "loss" in r]
if len(steps) < 2 or len(a) != len(b):
    print(f"FAILED {name}: {len(a)} records against {len(b)} ({len(steps)} steps)")
    sys.exit(1)
worst = 0.0
for ra, rb in zip(a, b):
    if ra.keys() != rb.keys():
        print(f"FAILED {name}: fields differ: {sorted(ra)} vs {sorted(rb)}")
        sys.exit(1)
    for k, va in ra.items():
        vb = rb[k]
        if isinstance(va, float) or isinstance(vb, float):
            rel = abs(va - vb) / max(abs(va), abs(vb), 1e-30)
            worst = max(worst, rel)
            if not math.isfinite(va) or rel > 1e-5:
                print(f"FAILED {name}: {k} {va} vs {vb} (record {ra})")
                sys.exit(1)
        elif va != vb:
            print(f"FAILED {name}: {k} {va} vs {vb}")
            sys.exit(1)
same = "bit for bit" if a == b else f"within {worst:.1e} relative"
print(f"ok {name}: {len(steps)} steps agree {same}; last: {steps[-1]}")
