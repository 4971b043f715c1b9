#!/usr/bin/env python3
"""A GGUF model in tensorpar against llama.cpp (llama-cpp-python, weight repacking off on AMX CPUs): perplexity
on the same token ids (llama.cpp's tokenization of a text, BOS first when the file asks for it,
windows of --ctx tokens from an empty cache, as `tensorpar perplexity`) at each --tp, and greedy
text of a few prompts (each engine tokenizes the prompt itself; the generated text is compared).

Usage: PY=$(tools/venv.sh bench) && "$PY" bench/model_vs_llamacpp.py --model models/gemma-3-270m-q4_k_m.gguf
         [--bin build/bin/tensorpar] [--tp 1,2,3] [--ctx 1024] [--chars 12000] [--kv-dtype f16|f32]
         [--tp-invariant] [--out FILE.json]
Where a greedy text differs, the llama.cpp token it first differs at is named with llama.cpp's own
top-1/top-2 logit margin there.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))
import llamacpp_ppl  # noqa: E402

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Photosynthesis is the process by which"]


def tensorpar_json(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"model_vs_llamacpp: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return json.loads([ln for ln in p.stdout.split("\n") if ln.startswith("{")][-1])


def llama_greedy(llm, prompt, n):
    """llama.cpp's greedy text, and per generated token the text up to it and its logit margin
    (top-1 minus top-2): a small margin is a near tie that any rounding difference can flip."""
    ids = llamacpp_ppl.tokenize_text(llm, prompt)
    llm.reset()
    llm.eval(ids)
    out, steps = [], []
    for _ in range(n):
        logits = llamacpp_ppl.last_logits(llm)
        top2 = np.partition(logits, -2)[-2:]
        tok = int(np.argmax(logits))
        if tok == llm.token_eos():
            break
        out.append(tok)
        steps.append({"text_through": llm.detokenize(out).decode("utf-8", errors="replace"),
                      "margin": float(abs(top2[1] - top2[0]))})
        llm.eval([tok])
    return llm.detokenize(out).decode("utf-8", errors="replace"), steps


def divergence(steps, text):
    """The first llama.cpp token whose text `text` does not share, with its margin (None: equal)."""
    for i, s in enumerate(steps):
        if not text.startswith(s["text_through"]):
            return {"token": i, "llama_margin": s["margin"]}
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin", "tensorpar"))
    ap.add_argument("--tp", default="1,2,3")
    ap.add_argument("--ctx", type=int, default=1024, help="perplexity window (> 512 makes Gemma 3's window slide)")
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--chars", type=int, default=12000)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-dtype", default="f16", choices=["f32", "f16"],
                    help="tensorpar's KV cache (f16: as llama.cpp's default cache, which it is compared with)")
    ap.add_argument("--tp-invariant", action="store_true",
                    help="run tensorpar with --tp-invariant (logits bitwise the same at every --tp)")
    ap.add_argument("--out")
    a = ap.parse_args()
    extra = ["--tp-invariant"] if a.tp_invariant else []
    import llama_cpp
    repacking = llamacpp_ppl.repack_weights_unless_amx()
    text = open(a.text, encoding="utf-8").read()[:a.chars]
    llm = llamacpp_ppl.load(a.model, a.ctx, a.threads, logits_all=True)
    ids = llamacpp_ppl.tokenize_text(llm, text)
    nll, scored = llamacpp_ppl.window_nll(llm, ids, a.ctx)
    res = {"model": a.model, "llama_cpp_python": llama_cpp.__version__,
           "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode(), "weight_repacking": repacking,
           "ctx": a.ctx, "tokens": len(ids), "scored": scored, "llama_ppl": math.exp(nll / scored),
           "kv_dtype": a.kv_dtype, "tp_invariant": a.tp_invariant, "greedy": {}, "greedy_llama_steps": {}, "greedy_divergence": {}, "tp": {}}
    for p in PROMPTS:
        text, steps = llama_greedy(llm, p, a.max_tokens)
        res["greedy"][p] = {"llama": text}
        res["greedy_llama_steps"][p] = steps
        res["greedy_divergence"][p] = {}
    del llm
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(" ".join(map(str, ids)))
        tok_file = f.name
    for tp in [int(x) for x in a.tp.split(",")]:
        thr = max(1, a.threads // tp)
        ppl = tensorpar_json([a.bin, "perplexity", "--model", a.model, "--tp", str(tp), "--threads-per-rank", str(thr),
                              "--ctx", str(a.ctx), "--tokens-file", tok_file, "--kv-dtype", a.kv_dtype, "--json"] + extra)
        res["tp"][tp] = {"ppl": ppl["ppl"], "scored": ppl.get("scored")}
        for p in PROMPTS:
            g = tensorpar_json([a.bin, "generate", "--model", a.model, "--tp", str(tp), "--threads-per-rank", str(thr),
                                "--prompt", p, "--max-tokens", str(a.max_tokens), "--kv-dtype", a.kv_dtype, "--json"] + extra)
            res["greedy"][p][f"tp{tp}"] = g["text"]
            res["greedy_divergence"][p][f"tp{tp}"] = divergence(res["greedy_llama_steps"][p], g["text"])
    os.unlink(tok_file)
    print(f"perplexity over {scored} tokens (windows of {a.ctx}): llama.cpp {res['llama_ppl']:.4f}")
    for tp, r in res["tp"].items():
        print(f"  tensorpar tp {tp}: {r['ppl']:.4f} ({(r['ppl'] / res['llama_ppl'] - 1) * 100:+.2f}%)")
    for p, g in res["greedy"].items():
        same = all(v == g["llama"] for k, v in g.items())
        print(f"greedy {'EQUAL' if same else 'DIFFERENT'}: {p!r}")
        for k, v in g.items():
            d = res["greedy_divergence"][p].get(k)
            where = f"  (differs from llama.cpp's token {d['token']}, whose llama.cpp margin is {d['llama_margin']:.3f})" if d else ""
            print(f"    {k:6} {v!r}{where}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
