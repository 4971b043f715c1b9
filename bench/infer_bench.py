#!/usr/bin/env python3
"""Inference benchmark: tensorpar (tp 1 x 2 threads, tp 2 x 1 thread) beside llama.cpp
(llama-cpp-python, 2 threads) on the same GGUF: prefill and decode tok/s (medians of interleaved
rounds), perplexity of both on the same tokens and windows, weight memory per rank, and decode as
a fraction of the roofline: weight bytes a decode step reads / the read bandwidth of as many
concurrent streams as cores (bench/decode_bench.py's measurement, before every round and after
the last; their median).

Both engines run on the same cores (--cores): tensorpar under taskset, each of its threads then
pinned to one of them by tensorpar itself; llama.cpp in this process, whose affinity is set to
those cores before it starts its threads (llama-cpp-python has no per-thread pinning). The JSON
records the pinning, llama-cpp-python's version and llama.cpp's system_info.

Run through bench/infer_bench.sh (it makes the venv with llama-cpp-python). Prints a markdown
table and the targets of issue 4; --out writes every raw measurement as JSON.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))
import llamacpp_ppl  # noqa: E402  (tools/llamacpp_ppl.py: same windowing as tensorpar perplexity)
from decode_bench import measure_bandwidth  # noqa: E402  (this directory)

TP_CONFIGS = [("tensorpar tp1 x2", 1, 2), ("tensorpar tp2 x1", 2, 1)]


def tensorpar_generate(binary, model, tp, threads, prompt, max_tokens, ctx, cores):
    cmd = ["taskset", "-c", ",".join(map(str, cores)), binary, "generate", "--model", model, "--tp", str(tp),
           "--threads-per-rank", str(threads),
           "--prompt", prompt, "--max-tokens", str(max_tokens), "--ctx", str(ctx), "--json"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"infer_bench: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    j = json.loads([ln for ln in p.stdout.split("\n") if ln.startswith("{")][-1])
    j["wall_s"] = wall
    return j


def llama_generate(model, threads, prompt, max_tokens, ctx):
    """Same protocol as tensorpar generate (greedy): prefill = prompt forward + first argmax; decode
    = every later forward + argmax. EOS is ignored so every run decodes max_tokens - 1 steps."""
    llm = llamacpp_ppl.load(model, ctx, threads, logits_all=False)
    ids = llamacpp_ppl.tokenize_text(llm, prompt)
    t0 = time.perf_counter()
    llm.eval(ids)
    tok = int(np.argmax(llamacpp_ppl.last_logits(llm)))
    t1 = time.perf_counter()
    for _ in range(max_tokens - 1):
        llm.eval([tok])
        tok = int(np.argmax(llamacpp_ppl.last_logits(llm)))
    t2 = time.perf_counter()
    steps = max_tokens - 1
    r = {"prompt_tokens": len(ids), "prefill_tok_s": len(ids) / (t1 - t0),
         "decode_tok_s": steps / (t2 - t1) if steps else 0.0, "tokens": max_tokens}
    del llm
    return r


def tensorpar_ppl(binary, model, tp, threads, ctx, tokens_file=None, text_file=None):
    cmd = [binary, "perplexity", "--model", model, "--tp", str(tp), "--threads-per-rank", str(threads),
           "--ctx", str(ctx), "--json"]
    cmd += ["--tokens-file", tokens_file] if tokens_file else ["--file", text_file]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"infer_bench: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return json.loads([ln for ln in p.stdout.split("\n") if ln.startswith("{")][-1])


def tensorpar_weight_bytes(binary, model, tp):
    p = subprocess.run([binary, "inspect", "--model", model, "--tp", str(tp), "--json"], capture_output=True,
                       text=True, check=True)
    last = json.loads(p.stdout.strip().split("\n")[-1])
    return last["bytes_per_rank"], last["file_bytes"]


def weight_bytes_per_token(binary, model):
    """Bytes of the matrices a decode step reads: every tensor of 2 or more dims but the token
    embedding (one row of it is read), which with tied embeddings is read whole as the LM head."""
    p = subprocess.run([binary, "inspect", "--model", model, "--json"], capture_output=True, text=True, check=True)
    rows = [json.loads(ln) for ln in p.stdout.split("\n") if ln.startswith("{")]
    tied = rows[0]["config"].get("tied", False)
    total = 0
    for t in rows[1:]:
        if "tensor" not in t or len(t["shape"]) < 2:
            continue
        if t["tensor"] in ("token_embd.weight", "model.embed_tokens.weight") and not tied:
            continue
        total += t["bytes"]
    return total


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin", "tensorpar"))
    ap.add_argument("--model", default=os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3", help="corpus (Debian base-files)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians reported)")
    ap.add_argument("--max-tokens", type=int, default=128, help="generated tokens per decode run")
    ap.add_argument("--decode-prompt-chars", type=int, default=120)
    ap.add_argument("--prefill-prompt-chars", type=int, default=2000, help="about 450 tokens")
    ap.add_argument("--ppl-chars", type=int, default=12000, help="perplexity text: the corpus' first N chars")
    ap.add_argument("--ppl-ctx", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2, help="cores per engine (tp x threads-per-rank)")
    ap.add_argument("--cores", default="0,1", help="the cores both engines are pinned to")
    ap.add_argument("--skip-ppl", action="store_true")
    ap.add_argument("--out", help="write all raw measurements as JSON")
    a = ap.parse_args()
    repacking = llamacpp_ppl.repack_weights_unless_amx()  # off only on AMX CPUs: 0.3.36 crashes there
    assert a.threads == 2, "the configurations below are for 2 cores"
    cores = [int(c) for c in a.cores.split(",")]
    assert len(cores) == a.threads, "--cores names one core per thread"
    os.sched_setaffinity(0, cores)  # llama.cpp runs in this process: its threads inherit the mask
    import llama_cpp  # noqa: E402  (the venv of bench/infer_bench.sh)

    with open(a.text, encoding="utf-8") as f:
        corpus = f.read()
    decode_prompt = corpus[:a.decode_prompt_chars]
    prefill_prompt = corpus[:a.prefill_prompt_chars]
    gen_ctx = 1024
    engines = [name for name, _, _ in TP_CONFIGS] + ["llama.cpp x2"]
    raw = {e: {"decode": [], "prefill": []} for e in engines}
    meta = {"bin": a.bin, "model": a.model, "rounds": a.rounds, "loadavg_start": os.getloadavg(),
            "pinning": {"cores": cores,
                        "tensorpar": f"taskset -c {a.cores}; each thread pinned to one core by tensorpar",
                        "llama.cpp": f"process affinity {a.cores} (its threads not pinned one to a core)"},
            "llama_cpp_python": llama_cpp.__version__, "llama_cpp_weight_repacking": repacking,
            "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode().strip()}
    print(f"# model {a.model}; {a.rounds} rounds; load average {os.getloadavg()[0]:.1f}", file=sys.stderr)

    bandwidth = []

    def sample_bandwidth():
        bw = measure_bandwidth(len(cores), cores)
        bandwidth.append(bw)
        print(f"# bandwidth, {len(cores)} streams: read {bw['read_gb_s']:.1f} GB/s", file=sys.stderr)

    for rnd in range(a.rounds):
        sample_bandwidth()
        order = engines[rnd % len(engines):] + engines[:rnd % len(engines)]  # rotate who goes first
        for e in order:
            for kind, prompt, n in (("decode", decode_prompt, a.max_tokens), ("prefill", prefill_prompt, 1)):
                if e.startswith("llama"):
                    r = llama_generate(a.model, a.threads, prompt, n, gen_ctx)
                else:
                    _, tp, thr = next(c for c in TP_CONFIGS if c[0] == e)
                    r = tensorpar_generate(a.bin, a.model, tp, thr, prompt, n, gen_ctx, cores)
                raw[e][kind].append(r)
        line = "  ".join(f"{e}: dec {raw[e]['decode'][-1]['decode_tok_s']:.1f} pre "
                         f"{raw[e]['prefill'][-1]['prefill_tok_s']:.1f}" for e in engines)
        print(f"# round {rnd + 1}: {line}  (load {os.getloadavg()[0]:.1f})", file=sys.stderr)

    sample_bandwidth()
    read_gb_s = med([b["read_gb_s"] for b in bandwidth])
    step_bytes = weight_bytes_per_token(a.bin, a.model)
    meta.update(bandwidth=bandwidth, read_gb_s=read_gb_s, weight_bytes_per_token=step_bytes)
    summary = {}
    for e in engines:
        summary[e] = {
            "decode_tok_s": med([r["decode_tok_s"] for r in raw[e]["decode"]]),
            "prefill_tok_s": med([r["prefill_tok_s"] for r in raw[e]["prefill"]]),
            "decode_tokens": raw[e]["decode"][0]["tokens"],
            "prompt_tokens": raw[e]["prefill"][0]["prompt_tokens"],
            "mem_mb_per_rank": raw[e]["decode"][0].get("weights_kv_mb_per_rank"),
        }
        summary[e]["decode_roofline_fraction"] = summary[e]["decode_tok_s"] * step_bytes / 1e9 / read_gb_s
        # Each round against the bandwidth sampled around it (the mean of the samples before and
        # after): another tenant on the memory bus moves the samples by up to 2x within a run, and
        # the run's median bandwidth can belong to other rounds than the engine's median decode.
        per_round = [r["decode_tok_s"] * step_bytes / 1e9 / ((bandwidth[i]["read_gb_s"] + bandwidth[i + 1]["read_gb_s"]) / 2)
                     for i, r in enumerate(raw[e]["decode"])]
        summary[e]["decode_roofline_fraction_rounds"] = per_round
        summary[e]["decode_roofline_fraction_round_median"] = med(per_round)
    for name, tp, _ in TP_CONFIGS:
        summary[name]["weight_bytes_per_rank"], file_bytes = tensorpar_weight_bytes(a.bin, a.model, tp)
    meta["model_file_bytes"] = file_bytes

    ppl = {}
    if not a.skip_ppl:
        with tempfile.TemporaryDirectory() as tmp:
            text_file = os.path.join(tmp, "ppl.txt")
            ids_file = os.path.join(tmp, "ids.txt")
            with open(text_file, "w", encoding="utf-8") as f:
                f.write(corpus[:a.ppl_chars])
            llm = llamacpp_ppl.load(a.model, a.ppl_ctx, a.threads, logits_all=True)
            ids = llamacpp_ppl.tokenize_text(llm, corpus[:a.ppl_chars])
            with open(ids_file, "w") as f:
                f.write(" ".join(map(str, ids)) + "\n")
            nll, scored = llamacpp_ppl.window_nll(llm, ids, a.ppl_ctx)
            del llm
            ppl["llama.cpp"] = {"ppl": math.exp(nll / scored), "tokens": len(ids), "scored": scored}
            for name, tp, thr in TP_CONFIGS:
                ppl[name + " (llama.cpp ids)"] = tensorpar_ppl(a.bin, a.model, tp, thr, a.ppl_ctx, tokens_file=ids_file)
            ppl["tensorpar tp1 (own tokenizer)"] = tensorpar_ppl(a.bin, a.model, 1, 2, a.ppl_ctx, text_file=text_file)
    meta["loadavg_end"] = os.getloadavg()

    # ---- report
    L = summary["llama.cpp x2"]
    print(f"\n{step_bytes / 1e6:.1f} MB of weights read per decode step; read bandwidth {read_gb_s:.1f} GB/s "
          f"({len(cores)} streams, median of {len(bandwidth)}): roofline {read_gb_s * 1e9 / step_bytes:.0f} tok/s")
    print("\n| engine | prefill tok/s | decode tok/s | of roofline | of roofline, round by round (median) "
          "| decode / llama.cpp | prefill / llama.cpp | weights per rank MiB | weights + KV per rank MiB |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|")
    for e in engines:
        s = summary[e]
        wb = s.get("weight_bytes_per_rank")
        w = " / ".join(f"{b / 2**20:.1f}" for b in wb) if wb else f"{meta['model_file_bytes'] / 2**20:.1f} (file)"
        m = " / ".join(f"{x:.1f}" for x in s["mem_mb_per_rank"]) if s["mem_mb_per_rank"] else "-"
        rounds = " ".join(f"{x:.2f}" for x in s["decode_roofline_fraction_rounds"])
        print(f"| {e} | {s['prefill_tok_s']:.1f} | {s['decode_tok_s']:.1f} | {s['decode_roofline_fraction']:.2f} | "
              f"{rounds} ({s['decode_roofline_fraction_round_median']:.2f}) | "
              f"{s['decode_tok_s'] / L['decode_tok_s']:.2f}x | {s['prefill_tok_s'] / L['prefill_tok_s']:.2f}x | {w} | {m} |")
    print(f"\nprompt tokens (prefill run): " + ", ".join(f"{e} {summary[e]['prompt_tokens']}" for e in engines))
    print(f"generated tokens (decode run): " + ", ".join(f"{e} {summary[e]['decode_tokens']}" for e in engines))
    if ppl:
        print(f"\n| perplexity ({a.ppl_chars} chars of {a.text}, windows of {a.ppl_ctx}) | ppl | tokens | scored |")
        print("|---|---:|---:|---:|")
        for k, v in ppl.items():
            print(f"| {k} | {v['ppl']:.4f} | {v['tokens']} | {v['scored']} |")

    t1, t2 = summary["tensorpar tp1 x2"], summary["tensorpar tp2 x1"]
    w1 = max(t1["weight_bytes_per_rank"])
    w2 = max(t2["weight_bytes_per_rank"])
    best = max(t1["decode_tok_s"], t2["decode_tok_s"])
    targets = [
        ("decode tp2 >= 0.9x tp1 (equal cores)", t2["decode_tok_s"] / t1["decode_tok_s"], 0.9, ">="),
        ("decode tp1 >= 0.8x llama.cpp", t1["decode_tok_s"] / L["decode_tok_s"], 0.8, ">="),
        ("decode tp2 >= 0.8x llama.cpp", t2["decode_tok_s"] / L["decode_tok_s"], 0.8, ">="),
        ("decode best tp >= 0.8x llama.cpp", best / L["decode_tok_s"], 0.8, ">="),
        ("weights per rank tp2 <= 0.6x tp1", w2 / w1, 0.6, "<="),
    ]
    if ppl:
        for name, _, _ in TP_CONFIGS:
            d = abs(ppl[name + " (llama.cpp ids)"]["ppl"] / ppl["llama.cpp"]["ppl"] - 1)
            targets.append((f"ppl {name.split()[1]} within 1% of llama.cpp (|rel diff|)", d, 0.01, "<="))
    print("\n| target | measured | met |\n|---|---:|---|")
    for name, v, lim, op in targets:
        ok = v >= lim if op == ">=" else v <= lim
        print(f"| {name} | {v:.4f} | {'yes' if ok else 'NO'} |")
    print(f"\nload average: start {meta['loadavg_start'][0]:.1f}, end {meta['loadavg_end'][0]:.1f}")
    print(f"pinned to cores {a.cores}; llama-cpp-python {meta['llama_cpp_python']} (weight repacking "
          f"{'on' if repacking else 'off'}); "
          f"llama.cpp system_info: {meta['llama_cpp_system_info']}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "summary": summary, "ppl": ppl, "raw": raw}, f, indent=1)


if __name__ == "__main__":
    main()
