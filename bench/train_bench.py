#!/usr/bin/env python3
"""Training throughput: one Llama-style model (~10M parameters by default) trained by tensorpar at
tp 1 (2 threads) and tp 2 (1 thread per rank), in f32 and with --bf16 (bf16 matmul operands, f32
accumulation and master weights), and data parallelism instead (tp 1 x --dp 2, 1 thread each),
beside PyTorch at its best on the same cores: transformers' LlamaForCausalLM (same config, batch,
sequence length; sdpa attention), `torch.compile` (inductor) of the model, AdamW with `fused=True`
(foreach where fused is missing), gradient clipping, `torch.set_num_threads`, in f32 and under
`torch.autocast("cpu", dtype=torch.bfloat16)`; PyTorch eager (the same, not compiled) beside it.

Every measurement is a fresh process pinned with `taskset` to the same cores (--cores); the
engines run in interleaved rounds, the order rotating each round, and each reports the median
tokens/s of its steps after warm-up (compilation happens in the warm-up steps of the compiled
runs: it is excluded, and measured separately as compile_s; PyTorch's bf16 runs take
--torch-bf16-steps steps, since on a CPU without native bf16 they are 10x slower). Then activation recomputation: tp 2
without and with --recompute-layers (every layer), tokens/s and the process's peak RSS.

Usage: PY=$(tools/venv.sh) && "$PY" bench/train_bench.py [--bin build/bin/tensorpar] [--rounds 3]
         [--steps 12] [--warmup-steps 3] [--cores 0,1] [--out results.json]
       "$PY" bench/train_bench.py torch-worker ...   (one PyTorch measurement, JSON on stdout)
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_with_rss(cmd):
    """(returncode, stdout, stderr, peak RSS of the command in MiB), measured by GNU time: a child
    forked from this (torch-sized) interpreter would inherit its resident high-water mark."""
    p = subprocess.run(["/usr/bin/time", "-f", "TP_MAXRSS_KB %M", *cmd], capture_output=True, text=True)
    m = re.findall(r"TP_MAXRSS_KB (\d+)", p.stderr)
    return p.returncode, p.stdout, p.stderr, int(m[-1]) / 1024 if m else float("nan")


def pinned(a, cmd):
    return ["taskset", "-c", a.cores, *cmd]


def tensorpar_run(a, tp, threads, extra=()):
    cmd = [a.bin, "train", "--arch", "llama", "--layers", str(a.layers), "--hidden", str(a.hidden),
           "--heads", str(a.heads), "--kv-heads", str(a.kv_heads), "--ffn", str(a.ffn), "--seq", str(a.seq),
           "--vocab-from", a.tokenizer, "--data", a.data, "--batch", str(a.batch), "--steps", str(a.steps),
           "--lr", "1e-3", "--tp", str(tp), "--threads-per-rank", str(threads), "--json", *extra]
    rc, out, err, rss = run_with_rss(pinned(a, cmd))
    if rc != 0:
        sys.exit(f"train_bench: {' '.join(cmd)} failed:\n{err}")
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    tps = [r["tokens_per_s"] for r in rows[a.warmup_steps:]]
    m = re.search(r"([0-9.]+)M parameters.*per rank: ([0-9. /]+) MiB", err)
    mem = [float(x) for x in m.group(2).split("/")] if m else []
    vocab = re.search(r" V=(\d+)", err)
    return {"tokens_per_s": statistics.median(tps), "params_m": float(m.group(1)) if m else None,
            "mem_mib_per_rank": mem, "vocab": int(vocab.group(1)) if vocab else None,
            "losses": [r["loss"] for r in rows], "peak_rss_mib": rss}


def torch_run(a, vocab, compiled, bf16):
    steps = a.torch_bf16_steps if bf16 else a.steps
    cmd = [sys.executable, os.path.abspath(__file__), "torch-worker", "--vocab", str(vocab),
           "--threads", str(len(a.cores.split(","))), "--steps", str(steps), "--warmup-steps", str(a.warmup_steps)]
    for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "seq", "batch"):
        cmd += ["--" + k.replace("_", "-"), str(getattr(a, k))]
    if compiled:
        cmd.append("--compile")
    if bf16:
        cmd.append("--bf16")
    p = subprocess.run(pinned(a, cmd), capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"train_bench: {' '.join(cmd)} failed:\n{p.stderr[-4000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def torch_worker(a):
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.ffn,
                      num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                      max_position_embeddings=a.seq, tie_word_embeddings=True, attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg).float().train()
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
        adamw = "fused"
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
        adamw = "foreach"
    vocab = a.vocab

    def loss_of(ids):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            logits = model(input_ids=ids[:, :-1]).logits
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, vocab), ids[:, 1:].reshape(-1))

    step_loss = torch.compile(loss_of) if a.compile else loss_of
    g = torch.Generator().manual_seed(1)
    tps, times = [], []
    for step in range(a.steps):
        x = torch.randint(0, vocab, (a.batch, a.seq + 1), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = step_loss(x)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        times.append(dt)
        if step >= a.warmup_steps:
            tps.append(a.batch * a.seq / dt)
    steady = statistics.median(times[a.warmup_steps:])
    print(json.dumps({
        "tokens_per_s": statistics.median(tps), "params_m": sum(p.numel() for p in model.parameters()) / 1e6,
        "compiled": a.compile, "bf16_autocast": a.bf16, "adamw": adamw,
        "compile_s": round(sum(times[:a.warmup_steps]) - a.warmup_steps * steady, 2) if a.compile else 0.0,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(),
        "affinity": sorted(os.sched_getaffinity(0))}))


# Engines of one round: (key, what runs it). The order rotates each round.
def engines(a):
    n = len(a.cores.split(","))  # every engine uses all the pinned cores: one thread per core
    half = max(1, n // 2)
    return [
        ("tp1", lambda v: tensorpar_run(a, 1, n)),
        ("tp2", lambda v: tensorpar_run(a, 2, half)),
        ("tp1_bf16", lambda v: tensorpar_run(a, 1, n, ["--bf16"])),
        ("tp2_bf16", lambda v: tensorpar_run(a, 2, half, ["--bf16"])),
        ("tp1_dp2", lambda v: tensorpar_run(a, 1, half, ["--dp", "2"])),
        ("torch_compile", lambda v: torch_run(a, v, True, False)),
        ("torch_compile_bf16", lambda v: torch_run(a, v, True, True)),
        ("torch_eager", lambda v: torch_run(a, v, False, False)),
        ("torch_eager_bf16", lambda v: torch_run(a, v, False, True)),
    ]


def main_run(a):
    vocab = tensorpar_run(a, 1, len(a.cores.split(",")))["vocab"]  # also warms the page cache
    meta = {"cpu": next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
                        platform.processor()),
            "cores": a.cores, "loadavg_start": os.getloadavg(),
            "git": subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                                  text=True).stdout.strip()}
    results = []
    eng = engines(a)
    for r in range(a.rounds):
        order = eng[r % len(eng):] + eng[:r % len(eng)]
        row = {"round": r, "order": [k for k, _ in order]}
        for key, fn in order:
            row[key] = fn(vocab)
        t = {k: row[k]["tokens_per_s"] for k, _ in eng}
        row["ratios"] = {"tp1_vs_torch_compile": t["tp1"] / t["torch_compile"],
                         "tp1_bf16_vs_torch_compile_bf16": t["tp1_bf16"] / t["torch_compile_bf16"],
                         "tp1_vs_torch_eager": t["tp1"] / t["torch_eager"],
                         "tp1_bf16_vs_torch_eager_bf16": t["tp1_bf16"] / t["torch_eager_bf16"],
                         "tp2_vs_tp1": t["tp2"] / t["tp1"], "tp2_bf16_vs_tp1_bf16": t["tp2_bf16"] / t["tp1_bf16"],
                         "dp2_vs_tp1": t["tp1_dp2"] / t["tp1"]}
        results.append(row)
        print(f"round {r}: " + "  ".join(f"{k} {v:.0f}" for k, v in t.items()) + " tok/s | "
              + "  ".join(f"{k} {v:.2f}x" for k, v in row["ratios"].items()), flush=True)
    meta["loadavg_end"] = os.getloadavg()
    first = results[0]
    meta["torch"] = {k: first["torch_compile"][k] for k in ("torch", "transformers", "cpu_capability", "adamw", "threads")}
    summary = {k: statistics.median(r["ratios"][k] for r in results) for k in results[0]["ratios"]}
    summary.update({k + "_tok_s": statistics.median(r[k]["tokens_per_s"] for r in results) for k, _ in eng})
    print("medians: " + json.dumps({k: round(v, 3) for k, v in summary.items()}), flush=True)
    recompute = []
    for r in range(a.recompute_rounds):
        plain = tensorpar_run(a, 2, 1)
        re_all = tensorpar_run(a, 2, 1, ["--recompute-layers", str(a.layers)])
        recompute.append({"plain": plain, "recompute_all": re_all})
        print(f"recompute round {r}: tp2x1 f32 {plain['tokens_per_s']:.0f} tok/s, peak RSS {plain['peak_rss_mib']:.0f} MiB"
              f" | --recompute-layers {a.layers}: {re_all['tokens_per_s']:.0f} tok/s "
              f"({re_all['tokens_per_s'] / plain['tokens_per_s']:.2f}x), peak RSS {re_all['peak_rss_mib']:.0f} MiB | "
              f"same losses: {plain['losses'] == re_all['losses']}", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"config": vars(a), "meta": meta, "summary": summary, "rounds": results, "recompute": recompute},
                      f, indent=1)


def add_model_args(p):
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--hidden", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=1024)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup-steps", type=int, default=3)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "torch-worker":
        w = argparse.ArgumentParser(prog="train_bench.py torch-worker")
        add_model_args(w)
        w.add_argument("--vocab", type=int, required=True)
        w.add_argument("--threads", type=int, default=2)
        w.add_argument("--compile", action="store_true")
        w.add_argument("--bf16", action="store_true")
        torch_worker(w.parse_args(sys.argv[2:]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "build/bin/tensorpar"))
    ap.add_argument("--tokenizer", default=os.path.join(REPO, "tests/fixtures/tokenizer/gpt2_trained.tokenizer.json"))
    ap.add_argument("--data", default="/usr/share/games/fortunes/computers" if os.path.isfile("/usr/share/games/fortunes/computers")
                    else os.path.join(REPO, "tests/fixtures/README.md"))
    add_model_args(ap)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--recompute-rounds", type=int, default=1)
    ap.add_argument("--torch-bf16-steps", type=int, default=6,
                    help="steps of PyTorch's bf16 runs (on a CPU without native bf16, e.g. AVX2 only, "
                         "PyTorch's bf16 step takes 10-20 s here)")
    ap.add_argument("--cores", default="0,1", help="every engine is pinned to these cores (one thread each)")
    ap.add_argument("--out")
    main_run(ap.parse_args())


if __name__ == "__main__":
    main()
