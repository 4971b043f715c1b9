#!/usr/bin/env python3
"""Decode and prefill of 16-bit weights on Llama models of 0.3B / 0.7B / 1.5B parameters: tensorpar
(--dtype bf16; tp 1 x 2 threads and tp 2 x 1 thread; on the HF directory and on the GGUF) beside
llama.cpp (llama-cpp-python, bf16 GGUF, 2 threads) and PyTorch/transformers (bf16, 2 threads), all
pinned to the same cores, in interleaved rounds (medians). Decode is also given as a fraction of
the roofline: weight bytes read per token / the memory bandwidth measured here with as many
concurrent streams as the engines use cores (before every round and after the last; the median).

The models are random (normal, std 0.02, fixed seed; norms 1), written by transformers as bf16
safetensors + config.json + tokenizer (the trimmed Llama 3 tokenizer of the tokenizer fixtures:
1878 BPE tokens + 256 added = vocab 2134) and converted to a bf16 GGUF by llama.cpp's
convert_hf_to_gguf.py (from the llama-cpp-python sdist; the trimmed vocabulary's pre-tokenizer
hash is unknown to it, so it is told "llama-bpe", the pre-tokenizer of the full Llama 3 file).

Run through bench/decode_bench.sh. Subcommands:
  make      --sizes 0.3b,0.7b,1.5b        make the models under models/decode-bench/ (.venv python)
  run       --sizes ... --rounds 3 --out  the benchmark (any python; spawns the two venvs)
  bandwidth --cores 0,1                   only the memory bandwidth (one stream per core)
  torch-worker / llama-worker             one measurement, JSON on stdout (used by `run`)
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(REPO, "models", "decode-bench")
TOKENIZER = os.path.join(REPO, "tests", "fixtures", "tokenizer", "llama3.tokenizer.json")
VENV_TORCH = os.path.join(REPO, ".venv", "bin", "python")
VENV_LLAMA = os.environ.get("DECODE_BENCH_LLAMA_PY", os.path.join(REPO, ".venv-bench", "bin", "python"))
SEED = 1234

# name -> (hidden C, layers L, heads NH, kv heads NKV, ffn F); vocab 2134 (the tokenizer's)
SIZES = {
    "0.3b": (1536, 12, 24, 8, 4096),
    "0.7b": (2048, 16, 32, 8, 5632),
    "1.5b": (2560, 22, 20, 4, 6912),
}
VOCAB = 2134


def model_dir(name):
    return os.path.join(MODELS, f"llama-{name}-bf16")


def gguf_path(name):
    return os.path.join(MODELS, f"llama-{name}-bf16.gguf")


# ---------------------------------------------------------------- make (the .venv: torch, transformers)

def make_hf(name):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    C, L, NH, NKV, F = SIZES[name]
    out = model_dir(name)
    if os.path.exists(os.path.join(out, "model.safetensors")):
        return out
    tok = PreTrainedTokenizerFast(tokenizer_file=TOKENIZER, bos_token="<|begin_of_text|>",
                                  eos_token="<|end_of_text|>")
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=C, intermediate_size=F, num_hidden_layers=L,
                      num_attention_heads=NH, num_key_value_heads=NKV, max_position_embeddings=4096,
                      rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, torch_dtype="bfloat16")
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    # Our own seeded draw, tensor by tensor in state-dict order: the same bits on any transformers.
    gen = torch.Generator().manual_seed(SEED)
    state = {}
    for k, v in model.state_dict().items():
        if k.endswith("norm.weight"):
            state[k] = torch.ones(v.shape, dtype=torch.bfloat16)
        else:
            state[k] = (torch.randn(v.shape, generator=gen) * 0.02).to(torch.bfloat16)
    model.load_state_dict(state, assign=True)
    model = model.to(torch.bfloat16)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True, max_shard_size="20GB")
    tok.save_pretrained(out)
    return out


def llama_cpp_source():
    """vendor/llama.cpp of the llama-cpp-python sdist (downloaded and unpacked by
    bench/build_llama_server.sh; LLAMA_SERVER_ROOT as there)."""
    root = os.environ.get("LLAMA_SERVER_ROOT", os.path.expanduser("~/.cache/tensorpar/llama-server-0.3.36"))
    src = os.path.join(root, "llama_cpp_python-0.3.36", "vendor", "llama.cpp")
    if not os.path.exists(os.path.join(src, "convert_hf_to_gguf.py")):
        sys.exit(f"decode_bench: no convert_hf_to_gguf.py under {src} (run bench/build_llama_server.sh)")
    return src


def make_gguf(name):
    out = gguf_path(name)
    if os.path.exists(out):
        return out
    src = llama_cpp_source()
    code = (
        "import sys; sys.path.insert(0, {gp!r}); sys.path.insert(0, {src!r});\n"
        "import convert_hf_to_gguf as c\n"
        "import conversion.base as cb\n"
        "import conversion.llama as cl\n"
        "cb.TextModel.get_vocab_base_pre = lambda self, tokenizer: 'llama-bpe'\n"
        "cl.LlamaModel.set_vocab = lambda self: self._set_vocab_gpt2()  # tokenizer.json BPE, as Llama 3\n"
        "sys.argv = ['convert_hf_to_gguf.py', {d!r}, '--outtype', 'bf16', '--outfile', {o!r}]\n"
        "c.main()\n").format(gp=os.path.join(src, "gguf-py"), src=src, d=model_dir(name), o=out + ".tmp")
    p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"decode_bench: convert_hf_to_gguf.py on {model_dir(name)} failed:\n{p.stderr[-3000:]}")
    os.replace(out + ".tmp", out)
    return out


# ---------------------------------------------------------------- bandwidth

def _stream_worker(kind, nbytes, reps, start_at, q):
    import numpy as np
    a = np.ones(nbytes // 4, dtype=np.float32)
    b = np.empty_like(a)
    np.copyto(b, a)  # touch every page before timing
    while time.time() < start_at:
        pass
    t0 = time.perf_counter()
    for _ in range(reps):
        if kind == "copy":
            np.copyto(b, a)
        else:
            float(np.dot(a, a))  # BLAS sdot: one vectorized read pass, no writes
    q.put(time.perf_counter() - t0)


def measure_bandwidth(streams, cores, nbytes=1 << 29, reps=8):
    """GB/s (1e9) of `streams` concurrent processes, stream i pinned to cores[i % len(cores)]:
    read = np.dot(a, a) over a 512 MiB f32 array (BLAS sdot; bytes read); copy = np.copyto of one (bytes read +
    written, write-allocate traffic not counted). Best of 3 trials, aggregate over the streams."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    res = {}
    for kind in ("read", "copy"):
        best = 0.0
        for _ in range(3):
            q = ctx.Queue()
            start_at = time.time() + 2.0
            ps = []
            for i in range(streams):
                p = ctx.Process(target=_pinned, args=(cores[i % len(cores)], kind, nbytes, reps, start_at, q))
                p.start()
                ps.append(p)
            times = [q.get() for _ in ps]
            for p in ps:
                p.join()
            moved = nbytes * reps * (2 if kind == "copy" else 1) * streams
            best = max(best, moved / max(times) / 1e9)
        res[kind + "_gb_s"] = best
    res.update(streams=streams, array_bytes=nbytes, reps=reps)
    return res


def _pinned(core, *args):
    os.sched_setaffinity(0, {core})
    _stream_worker(*args)


# ---------------------------------------------------------------- workers (one measurement each)

def torch_worker(a):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.set_num_threads(a.threads)
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=torch.bfloat16).eval()
    ids = tok(a.prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        t0 = time.perf_counter()
        out = model(ids, use_cache=True)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        t1 = time.perf_counter()
        past = out.past_key_values
        for _ in range(a.max_tokens - 1):
            out = model(nxt, past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        t2 = time.perf_counter()
    steps = a.max_tokens - 1
    print(json.dumps({"prompt_tokens": ids.shape[1], "prefill_tok_s": ids.shape[1] / (t1 - t0),
                      "decode_tok_s": steps / (t2 - t1) if steps else 0.0, "decode_steps": steps,
                      "version": f"torch {torch.__version__}, transformers "
                                 f"{__import__('transformers').__version__}, {torch.get_num_threads()} threads"}))


def llama_worker(a):
    import numpy as np
    import llama_cpp
    from llama_cpp import Llama
    repacking = True
    if a.no_repack:
        sys.path.insert(0, os.path.join(REPO, "tools"))
        from llamacpp_ppl import repack_weights_unless_amx
        repacking = repack_weights_unless_amx()
    llm = Llama(model_path=a.model, n_ctx=a.ctx, n_batch=512, n_ubatch=512, n_threads=a.threads,
                n_threads_batch=a.threads, verbose=False)
    ids = list(llm.tokenize(a.prompt.encode("utf-8"), add_bos=True, special=False))
    logits = lambda: np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),))
    t0 = time.perf_counter()
    llm.eval(ids)
    tok = int(np.argmax(logits()))
    t1 = time.perf_counter()
    for _ in range(a.max_tokens - 1):  # EOS ignored: every run decodes max_tokens - 1 steps
        llm.eval([tok])
        tok = int(np.argmax(logits()))
    t2 = time.perf_counter()
    steps = a.max_tokens - 1
    print(json.dumps({"prompt_tokens": len(ids), "prefill_tok_s": len(ids) / (t1 - t0),
                      "decode_tok_s": steps / (t2 - t1) if steps else 0.0, "decode_steps": steps,
                      "version": f"llama-cpp-python {llama_cpp.__version__}", "weight_repacking": repacking,
                      "system_info": llama_cpp.llama_print_system_info().decode()}))


# ---------------------------------------------------------------- run

def pin(cores):
    return ["taskset", "-c", ",".join(map(str, cores))]


def run_json(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"decode_bench: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads([ln for ln in p.stdout.split("\n") if ln.startswith("{")][-1])


def engine_cmd(engine, a, name, prompt, n):
    cores = a.cores
    if engine.startswith("tensorpar"):
        _, tp, thr, src = engine.split()[:4]
        tp, thr = int(tp[2:]), int(thr[1:])
        model = model_dir(name) if src == "hf" else gguf_path(name)
        return pin(cores) + [a.bin, "generate", "--model", model, "--dtype", "bf16", "--tp", str(tp),
                             "--threads-per-rank", str(thr), "--prompt", prompt, "--max-tokens", str(n),
                             "--ctx", "1024", "--json"]
    worker = "llama-worker" if engine == "llama.cpp" else "torch-worker"
    py = VENV_LLAMA if engine == "llama.cpp" else VENV_TORCH
    model = gguf_path(name) if engine == "llama.cpp" else model_dir(name)
    return pin(cores) + [py, os.path.abspath(__file__), worker, "--model", model, "--prompt", prompt,
                         "--max-tokens", str(n), "--threads", str(len(cores))]


# A fifth word names the kernel bf16 weights go through (TENSORPAR_BF16_KERNEL, the same build):
# "rowwise" the row-wise kernel (f32 activations, lanes over K), "panels" the AVX2 panel kernel
# (f32 activations, weights in K-major panels), "avx512bf16" the AVX512-BF16 dot kernel; without
# one, the build's default for the CPU (AMX tiles, else AVX512-BF16 dots, else panels on AVX2
# without AVX-512, else row-wise). Rows whose kernel is the CPU's default anyway, or that the CPU
# lacks, are left out.
ENGINES = ["tensorpar tp1 x2 hf", "tensorpar tp2 x1 hf", "tensorpar tp1 x2 gguf", "tensorpar tp2 x1 gguf",
           "tensorpar tp1 x2 hf rowwise", "tensorpar tp1 x2 hf avx512bf16", "llama.cpp", "pytorch"]


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        return next((set(ln.split(":", 1)[1].split()) for ln in f if ln.startswith("flags")), set())


def default_bf16_kernel():
    flags = cpu_flags()
    if "amx_bf16" in flags:
        return "amx"
    if "avx512_bf16" in flags:
        return "avx512bf16"
    return "panels" if {"avx2", "fma", "f16c"} <= flags and "avx512f" not in flags else "rowwise"


def engine_kernel(engine):
    words = engine.split()
    return words[4] if engine.startswith("tensorpar") and len(words) > 4 else None


def engine_runs_here(engine):
    k = engine_kernel(engine)
    if k is None:
        return True
    flags = cpu_flags()
    usable = {"rowwise": True, "panels": {"avx2", "fma", "f16c"} <= flags, "avx512bf16": "avx512_bf16" in flags}[k]
    return usable and k != default_bf16_kernel()


def engine_env(engine):
    k = engine_kernel(engine)
    return dict(os.environ, TENSORPAR_BF16_KERNEL=k) if k else None


def weight_bytes(name):
    """Bytes of every matrix a decode step reads (all linear layers + the LM head; not the
    embedding, of which one row is read): the safetensors sizes of those tensors."""
    with open(os.path.join(model_dir(name), "model.safetensors"), "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    total = 0
    for k, v in header.items():
        if k == "__metadata__" or k.endswith("embed_tokens.weight") or "norm" in k:
            continue
        s, e = v["data_offsets"]
        total += e - s
    return total


def git_rev():
    p = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    d = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                       text=True)
    return p.stdout.strip() + ("+dirty" if d.stdout.strip() else "")


def run(a):
    with open(a.text, encoding="utf-8") as f:
        corpus = f.read()
    decode_prompt, prefill_prompt = corpus[:a.decode_prompt_chars], corpus[:a.prefill_prompt_chars]
    sizes = a.sizes.split(",")
    engines = [e for e in ENGINES if engine_runs_here(e) and
               (not a.engines or any(e == x or (x not in ENGINES and e.startswith(x)) for x in a.engines.split(",")))]
    for s in sizes:
        for p in (model_dir(s), gguf_path(s)):
            if not os.path.exists(p):
                sys.exit(f"decode_bench: {p} missing: run `bench/decode_bench.sh make --sizes {s}` first")
    meta = {"bin": a.bin, "git": git_rev(), "cores": a.cores, "rounds": a.rounds, "max_tokens": a.max_tokens,
            "cpu": next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
                        platform.processor()),
            "loadavg_start": os.getloadavg(), "seed": SEED}
    # The bandwidth before every round and after the last (a shared machine's memory bandwidth
    # moves with its neighbours); the roofline is taken at the median read bandwidth.
    samples = []

    def sample_bandwidth():
        bw = measure_bandwidth(len(a.cores), a.cores)
        samples.append(bw)
        print(f"# bandwidth, {len(a.cores)} streams: read {bw['read_gb_s']:.1f} GB/s, copy {bw['copy_gb_s']:.1f} GB/s",
              file=sys.stderr)

    sample_bandwidth()
    raw = {s: {e: {"decode": [], "prefill": []} for e in engines} for s in sizes}
    versions = {}
    for rnd in range(a.rounds):
        if rnd > 0:
            sample_bandwidth()
        for s in sizes:
            order = engines[rnd % len(engines):] + engines[:rnd % len(engines)]  # rotate who goes first
            for e in order:
                for kind, prompt, n in (("decode", decode_prompt, a.max_tokens), ("prefill", prefill_prompt, 1)):
                    r = run_json(engine_cmd(e, a, s, prompt, n), engine_env(e))
                    for k in ("version", "system_info"):
                        if k in r:
                            versions[e if k == "version" else "llama.cpp system_info"] = r.pop(k)
                    r.pop("text", None)
                    raw[s][e][kind].append(r)
            line = "  ".join(f"{e}: {raw[s][e]['decode'][-1]['decode_tok_s']:.1f}/"
                             f"{raw[s][e]['prefill'][-1]['prefill_tok_s']:.0f}" for e in engines)
            print(f"# round {rnd + 1} {s} (decode/prefill tok/s): {line}  (load {os.getloadavg()[0]:.1f})",
                  file=sys.stderr)
        if a.out:  # every round kept, even if a later one is interrupted
            with open(a.out + ".partial", "w") as f:
                json.dump({"meta": meta, "versions": versions, "raw": raw}, f, indent=1)
    sample_bandwidth()
    meta["bandwidth_samples"] = samples
    meta["bandwidth"] = dict(samples[0], read_gb_s=statistics.median(b["read_gb_s"] for b in samples),
                             copy_gb_s=statistics.median(b["copy_gb_s"] for b in samples))
    bw = meta["bandwidth"]
    meta["loadavg_end"] = os.getloadavg()
    meta["versions"] = versions
    summary = {}
    for s in sizes:
        wb = weight_bytes(s)
        summary[s] = {"weight_bytes_per_token": wb, "engines": {}}
        for e in engines:
            d = statistics.median(r["decode_tok_s"] for r in raw[s][e]["decode"])
            p = statistics.median(r["prefill_tok_s"] for r in raw[s][e]["prefill"])
            summary[s]["engines"][e] = {
                "decode_tok_s": d, "prefill_tok_s": p,
                "decode_gb_s": d * wb / 1e9, "decode_roofline_fraction": d * wb / 1e9 / bw["read_gb_s"],
                "prompt_tokens": raw[s][e]["prefill"][0]["prompt_tokens"],
                "decode_tokens": raw[s][e]["decode"][0].get("decode_steps", raw[s][e]["decode"][0].get("tokens"))}
    report(summary, meta, engines)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "summary": summary, "raw": raw}, f, indent=1)
        if os.path.exists(a.out + ".partial"):
            os.remove(a.out + ".partial")


def bandwidth_range(meta):
    reads = [b["read_gb_s"] for b in meta.get("bandwidth_samples", [])]
    return f"; median of {len(reads)} samples, {min(reads):.1f}-{max(reads):.1f}" if len(reads) > 1 else ""


def report(summary, meta, engines):
    bw = meta["bandwidth"]["read_gb_s"]
    for s, S in summary.items():
        wb = S["weight_bytes_per_token"]
        print(f"\n### {s}: {wb / 1e9:.3f} GB of weights read per token; roofline {bw / (wb / 1e9):.1f} tok/s "
              f"at {bw:.1f} GB/s ({meta['bandwidth']['streams']} read streams{bandwidth_range(meta)})\n")
        L = S["engines"].get("llama.cpp")
        T = S["engines"].get("pytorch")
        print("| engine | decode tok/s | decode GB/s | of roofline | decode / llama.cpp | decode / PyTorch "
              "| prefill tok/s | prefill / llama.cpp | prompt tokens |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for e in engines:
            r = S["engines"][e]
            rl = f"{r['decode_tok_s'] / L['decode_tok_s']:.2f}x" if L else "-"
            rt = f"{r['decode_tok_s'] / T['decode_tok_s']:.2f}x" if T else "-"
            pl = f"{r['prefill_tok_s'] / L['prefill_tok_s']:.2f}x" if L else "-"
            print(f"| {e} | {r['decode_tok_s']:.1f} | {r['decode_gb_s']:.1f} | {r['decode_roofline_fraction']:.2f} "
                  f"| {rl} | {rt} | {r['prefill_tok_s']:.0f} | {pl} | {r['prompt_tokens']} |")
    print(f"\nload average: start {meta['loadavg_start'][0]:.1f}, end {meta['loadavg_end'][0]:.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--sizes", default="0.3b,0.7b,1.5b")
    r = sub.add_parser("run")
    r.add_argument("--bin", default=os.path.join(REPO, "build", "bin", "tensorpar"))
    r.add_argument("--sizes", default="0.3b,0.7b,1.5b")
    r.add_argument("--engines", default="",
                   help="comma-separated engine names, or name prefixes (a full name selects that engine alone; default: all)")
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--max-tokens", type=int, default=64)
    r.add_argument("--cores", default="0,1", help="the cores every engine is pinned to")
    r.add_argument("--text", default="/usr/share/common-licenses/GPL-3", help="prompt source (Debian base-files)")
    r.add_argument("--decode-prompt-chars", type=int, default=120)
    r.add_argument("--prefill-prompt-chars", type=int, default=1500)
    r.add_argument("--out")
    b = sub.add_parser("bandwidth")
    b.add_argument("--cores", default="0,1")
    for w in ("torch-worker", "llama-worker"):
        p = sub.add_parser(w)
        p.add_argument("--model", required=True)
        p.add_argument("--prompt", required=True)
        p.add_argument("--max-tokens", type=int, required=True)
        p.add_argument("--threads", type=int, default=2)
        p.add_argument("--ctx", type=int, default=1024)
        if w == "llama-worker":
            p.add_argument("--no-repack", action="store_true",
                           help="on an AMX CPU, llama.cpp's AVX-512 kernels without weight repacking (its "
                                "AMX path crashes on some models there; tools/llamacpp_ppl.py)")
    a = ap.parse_args()
    if hasattr(a, "cores"):
        a.cores = [int(c) for c in a.cores.split(",")]
    if a.cmd == "make":
        for s in a.sizes.split(","):
            print(make_hf(s), make_gguf(s), file=sys.stderr)
    elif a.cmd == "run":
        run(a)
    elif a.cmd == "bandwidth":
        print(json.dumps(measure_bandwidth(len(a.cores), a.cores)))
    elif a.cmd == "torch-worker":
        torch_worker(a)
    else:
        llama_worker(a)


if __name__ == "__main__":
    main()
