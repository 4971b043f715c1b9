#!/usr/bin/env python3
"""Training throughput of issue 5: one Llama-style model (~10M parameters by default) trained by
tensorpar at tp 1 (2 threads) and tp 2 (1 thread per rank), in f32 and with --bf16 (bf16 matmuls,
f32 master weights), side by side with PyTorch (CPU, transformers' LlamaForCausalLM, same config,
batch, sequence length, AdamW, 2 threads) in f32 and under torch.autocast(cpu, bfloat16), doing
the same number of steps; and data parallelism instead, tp 1 x --dp 2 (1 thread each). Then activation recomputation: tp 2 without and with
--recompute-layers (every layer), tokens/s and the process's peak RSS. Reports median tokens/s
over the steps after warm-up, the ratios, and tensorpar's params+grads+AdamW memory per rank.
Rounds alternate engines (the machine is shared and noisy: compare ratios within a round).

Usage: PY=$(tools/venv.sh) && "$PY" bench/train_bench.py [--bin build/bin/tensorpar] [--rounds 2]
         [--steps 12] [--warmup-steps 2] [--out results.json]
"""
import argparse
import json
import os
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


def tensorpar_run(a, tp, threads, extra=()):
    cmd = [a.bin, "train", "--arch", "llama", "--layers", str(a.layers), "--hidden", str(a.hidden),
           "--heads", str(a.heads), "--kv-heads", str(a.kv_heads), "--ffn", str(a.ffn), "--seq", str(a.seq),
           "--vocab-from", a.tokenizer, "--data", a.data, "--batch", str(a.batch), "--steps", str(a.steps),
           "--lr", "1e-3", "--tp", str(tp), "--threads-per-rank", str(threads), "--json", *extra]
    rc, out, err, rss = run_with_rss(cmd)
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


def torch_run(a, vocab, threads, bf16=False):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=a.hidden, intermediate_size=a.ffn,
                      num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                      max_position_embeddings=a.seq, tie_word_embeddings=True, attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg).float().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(1)
    tps = []
    for step in range(a.steps):
        x = torch.randint(0, vocab, (a.batch, a.seq + 1), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=x[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, vocab), x[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        if step >= a.warmup_steps:
            tps.append(a.batch * a.seq / dt)
    n = sum(p.numel() for p in model.parameters())
    return {"tokens_per_s": statistics.median(tps), "params_m": n / 1e6, "torch": torch.__version__}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "build/bin/tensorpar"))
    ap.add_argument("--tokenizer", default=os.path.join(REPO, "tests/fixtures/tokenizer/gpt2_trained.tokenizer.json"))
    ap.add_argument("--data", default="/usr/share/games/fortunes/computers" if os.path.isfile("/usr/share/games/fortunes/computers")
                    else os.path.join(REPO, "tests/fixtures/README.md"))
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out")
    a = ap.parse_args()
    results = []
    for r in range(a.rounds):
        tp1 = tensorpar_run(a, 1, 2)
        tp2 = tensorpar_run(a, 2, 1)
        tp1b = tensorpar_run(a, 1, 2, ["--bf16"])
        tp2b = tensorpar_run(a, 2, 1, ["--bf16"])
        dp2 = tensorpar_run(a, 1, 1, ["--dp", "2"])
        pt = torch_run(a, tp1["vocab"], 2)
        ptb = torch_run(a, tp1["vocab"], 2, bf16=True)
        row = {"round": r, "tp1": tp1, "tp2": tp2, "tp1_bf16": tp1b, "tp2_bf16": tp2b, "tp1_dp2": dp2, "torch": pt,
               "torch_bf16": ptb,
               "tp1_vs_torch": tp1["tokens_per_s"] / pt["tokens_per_s"],
               "tp2_vs_tp1": tp2["tokens_per_s"] / tp1["tokens_per_s"],
               "tp1_bf16_vs_torch_bf16": tp1b["tokens_per_s"] / ptb["tokens_per_s"],
               "tp2_bf16_vs_tp1_bf16": tp2b["tokens_per_s"] / tp1b["tokens_per_s"]}
        results.append(row)
        print(f"round {r}: f32: tensorpar tp1x2 {tp1['tokens_per_s']:.0f} tok/s | tp2x1 {tp2['tokens_per_s']:.0f} | "
              f"PyTorch {pt['tokens_per_s']:.0f} | tp1/torch {row['tp1_vs_torch']:.2f}x | tp2/tp1 {row['tp2_vs_tp1']:.2f}x"
              f" || bf16: tp1x2 {tp1b['tokens_per_s']:.0f} | tp2x1 {tp2b['tokens_per_s']:.0f} | PyTorch autocast "
              f"{ptb['tokens_per_s']:.0f} | tp1/torch {row['tp1_bf16_vs_torch_bf16']:.2f}x | "
              f"tp2/tp1 {row['tp2_bf16_vs_tp1_bf16']:.2f}x || f32 tp1 x dp2 (1 thread each) {dp2['tokens_per_s']:.0f} "
              f"({dp2['tokens_per_s'] / tp1['tokens_per_s']:.2f}x tp1) || params {tp1['params_m']:.2f}M (torch {pt['params_m']:.2f}M) "
              f"| MiB/rank tp1 {tp1['mem_mib_per_rank']} tp2 {tp2['mem_mib_per_rank']}", flush=True)
    recompute = []
    for r in range(a.rounds):
        plain = tensorpar_run(a, 2, 1)
        re_all = tensorpar_run(a, 2, 1, ["--recompute-layers", str(a.layers)])
        recompute.append({"plain": plain, "recompute_all": re_all})
        print(f"recompute round {r}: tp2x1 f32 {plain['tokens_per_s']:.0f} tok/s, peak RSS {plain['peak_rss_mib']:.0f} MiB"
              f" | --recompute-layers {a.layers}: {re_all['tokens_per_s']:.0f} tok/s "
              f"({re_all['tokens_per_s'] / plain['tokens_per_s']:.2f}x), peak RSS {re_all['peak_rss_mib']:.0f} MiB | "
              f"same losses: {plain['losses'] == re_all['losses']}", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"config": vars(a), "rounds": results, "recompute": recompute}, f, indent=1)


if __name__ == "__main__":
    main()
