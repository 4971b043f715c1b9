#!/usr/bin/env python3
"""GGUF quant presets end to end: llama.cpp's own quantizer (llama_model_quantize from
llama-cpp-python, requantizing the default Q4_1 model) writes Q4_K_M, Q5_K_M, Q6_K, Q4_0 and Q8_0
files; each is loaded by `tensorpar generate` and `tensorpar perplexity` at tp 1 and tp 2 and
scored by llama.cpp on the same tokens and windows (tools/llamacpp_ppl.py).

Per file: the tensor types it holds (llama.cpp's fallbacks included), the file size, tensorpar's
weight memory per rank (measured: weights + KV at ctx C minus the KV growth from C to 2C), its
ratio to file size / tp, both perplexities with their relative difference, and tensorpar's decode
tok/s of the 16-token memory runs (best of 2: a smoke figure, not a speed benchmark; see
bench/infer_bench.sh for that).

Run through bench/kquant_bench.sh (it makes the venv with llama-cpp-python). --out writes the
raw results as JSON.
"""
import argparse
import collections
import ctypes
import json
import math
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))
import llamacpp_ppl  # noqa: E402  (same windowing as tensorpar perplexity)

PRESETS = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q4_0", "Q8_0"]


def quantize(src, dst, preset, threads):
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{preset}")
    params.allow_requantize = True
    params.nthread = threads
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
    if rc != 0:
        sys.exit(f"kquant_bench: llama_model_quantize({src} -> {preset}) failed: {rc}")


def run_json(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"kquant_bench: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    return [json.loads(ln) for ln in lines], p.stderr


def tensor_types(binary, model):
    lines, _ = run_json([binary, "inspect", "--model", model, "--json"])
    return dict(collections.Counter(j["dtype"] for j in lines if "tensor" in j))


def weights_per_rank_mib(binary, model, tp, threads, prompt, ctx):
    """Weights alone per rank: weights+KV at ctx and 2*ctx; the KV part grows linearly with ctx."""
    mem, stderr, decode = {}, "", []
    text = None
    for c in (ctx, 2 * ctx):
        lines, err = run_json([binary, "generate", "--model", model, "--tp", str(tp), "--threads-per-rank",
                               str(threads), "--prompt", prompt, "--max-tokens", "16", "--ctx", str(c), "--json"])
        mem[c] = lines[-1]["weights_kv_mb_per_rank"]
        text = text or lines[-1]["text"]
        decode.append(lines[-1]["decode_tok_s"])
        stderr += err
    w = [2 * a - b for a, b in zip(mem[ctx], mem[2 * ctx])]
    notes = sorted({ln for ln in stderr.splitlines() if "dequantized" in ln})
    return w, text, notes, max(decode)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin", "tensorpar"))
    ap.add_argument("--source", default=os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--dir", default=os.path.join(REPO, "models", "presets"), help="where the quantized files go")
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3", help="corpus (Debian base-files)")
    ap.add_argument("--ppl-chars", type=int, default=12000)
    ap.add_argument("--ppl-ctx", type=int, default=256)
    ap.add_argument("--mem-ctx", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2, help="cores per engine (tp x threads-per-rank)")
    ap.add_argument("--out", help="write the raw results as JSON")
    a = ap.parse_args()

    import llama_cpp
    repacking = llamacpp_ppl.repack_weights_unless_amx()
    os.makedirs(a.dir, exist_ok=True)
    with open(a.text, encoding="utf-8") as f:
        corpus = f.read()
    stem = os.path.basename(a.source).split(".")[0]
    meta = {"source": a.source, "llama_cpp_python": llama_cpp.__version__,
            "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode(), "threads": a.threads,
            "llama_cpp_weight_repacking": repacking,
            "ppl": f"first {a.ppl_chars} chars of {a.text}, windows of {a.ppl_ctx} tokens (llama.cpp's tokens)"}
    results = []
    for preset in a.presets.split(","):
        path = os.path.join(a.dir, f"{stem}.{preset}.gguf")
        if not os.path.exists(path):
            print(f"# quantizing {a.source} -> {preset}", file=sys.stderr)
            quantize(a.source, path, preset, a.threads)
        llm = llamacpp_ppl.load(path, a.ppl_ctx, a.threads, logits_all=True)
        ids = llamacpp_ppl.tokenize_text(llm, corpus[:a.ppl_chars])
        nll, scored = llamacpp_ppl.window_nll(llm, ids, a.ppl_ctx)
        del llm
        llama_ppl = math.exp(nll / scored)
        r = {"preset": preset, "file": path, "file_bytes": os.path.getsize(path),
             "types": tensor_types(a.bin, path), "llama_ppl": llama_ppl, "scored": scored, "tp": {}}
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(" ".join(map(str, ids)))
            tok_file = f.name
        for tp in (1, 2):
            thr = a.threads // tp
            lines, _ = run_json([a.bin, "perplexity", "--model", path, "--tp", str(tp), "--threads-per-rank", str(thr),
                                 "--ctx", str(a.ppl_ctx), "--tokens-file", tok_file, "--json"])
            w, text, notes, dec = weights_per_rank_mib(a.bin, path, tp, thr, corpus[:120], a.mem_ctx)
            r["tp"][tp] = {"ppl": lines[-1]["ppl"], "scored": lines[-1]["scored"], "weights_mib_per_rank": w,
                           "greedy_16": text, "fallback_notes": notes, "decode_tok_s_best_of_2": dec}
            print(f"# {preset} tp{tp}: ppl {lines[-1]['ppl']:.4f} (llama.cpp {llama_ppl:.4f}), weights/rank "
                  f"{', '.join(f'{x:.1f}' for x in w)} MiB, file {r['file_bytes'] / 2**20:.1f} MiB", file=sys.stderr)
        os.unlink(tok_file)
        results.append(r)

    print(f"\n| file | tensor types | file MiB | tp | weights per rank MiB | ÷ (file / tp) | ppl tensorpar | "
          f"ppl llama.cpp | diff | decode tok/s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        types = ", ".join(f"{k} {v}" for k, v in sorted(r["types"].items()))
        fm = r["file_bytes"] / 2**20
        for tp, t in r["tp"].items():
            w = max(t["weights_mib_per_rank"])
            print(f"| {r['preset']} | {types} | {fm:.1f} | {tp} | {' / '.join(f'{x:.1f}' for x in t['weights_mib_per_rank'])} "
                  f"| {w / (fm / tp):.2f} | {t['ppl']:.4f} | {r['llama_ppl']:.4f} | "
                  f"{100 * (t['ppl'] / r['llama_ppl'] - 1):+.2f}% | {t['decode_tok_s_best_of_2']:.0f} |")
    print(f"\nllama.cpp: llama-cpp-python {meta['llama_cpp_python']}; system_info: {meta['llama_cpp_system_info']}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
