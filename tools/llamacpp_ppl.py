#!/usr/bin/env python3
"""Perplexity and speed of llama.cpp (through llama-cpp-python) on a GGUF file, windowed exactly
as `tensorpar perplexity`: the token stream is cut into windows of --ctx tokens, each run from an
empty cache, and every token after the first of each window is scored (NLL in float64).

Usage (needs llama-cpp-python, e.g. the venv of bench/infer_bench.sh):
  python tools/llamacpp_ppl.py --model M --file TEXT --ctx 256 [--threads 2] [--tokens-out ids.txt]
  python tools/llamacpp_ppl.py --model M --tokens-file ids.txt --ctx 256
Prints one JSON line {"ppl", "tokens", "scored"}. --tokens-out writes llama.cpp's token ids of
--file (BOS added when the GGUF asks for it) for `tensorpar perplexity --tokens-file`.
"""
import argparse
import json
import math
import sys

import numpy as np


def cpu_has_amx():
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and "amx_int8" in line.split() for line in f)
    except OSError:
        return False


def repack_weights_unless_amx():
    """Returns whether llama.cpp repacks its weights from here on. llama.cpp 0.3.36 on a CPU with
    amx_int8 crashes in its AMX matmul when it repacks them (bench/serve_bench.sh passes --no-repack
    to llama-server for the same reason): on such a CPU every model loaded after this call has
    use_extra_bufts off, so llama.cpp runs its AVX-512 kernels. Elsewhere llama.cpp keeps its
    repacked kernels (its best)."""
    if not cpu_has_amx():
        return True
    import llama_cpp.llama_cpp as lc
    default = lc.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p
    lc.llama_model_default_params = params
    return False


def load(model, ctx, threads, logits_all):
    from llama_cpp import Llama  # imported late: --help works without llama-cpp-python
    return Llama(model_path=model, n_ctx=ctx, n_batch=min(ctx, 512), n_ubatch=min(ctx, 512), n_threads=threads,
                 n_threads_batch=threads, logits_all=logits_all, verbose=False)


def last_logits(llm):
    """Logits of the last token evaluated (works without logits_all)."""
    return np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),))


def tokenize_text(llm, text):
    """llama.cpp's ids of `text` (no special-token parsing), BOS first when the model adds one."""
    return list(llm.tokenize(text.encode("utf-8"), add_bos=True, special=False))


def window_nll(llm, tokens, ctx):
    """Sum of NLL (nats) and count over windows of `ctx` tokens, each from an empty cache."""
    nll, scored = 0.0, 0
    for start in range(0, len(tokens), ctx):
        win = tokens[start:start + ctx]
        if len(win) < 2:
            continue
        llm.reset()
        llm.eval(win)
        logits = np.asarray(llm.scores[:len(win) - 1], dtype=np.float64)  # row t predicts win[t + 1]
        m = logits.max(axis=1, keepdims=True)
        lse = (m[:, 0] + np.log(np.exp(logits - m).sum(axis=1)))
        tgt = logits[np.arange(len(win) - 1), np.asarray(win[1:])]
        nll += float((lse - tgt).sum())
        scored += len(win) - 1
    return nll, scored


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--file", help="text file (tokenized by llama.cpp)")
    ap.add_argument("--tokens-file", help="whitespace-separated token ids")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens-out", help="write the token ids used here")
    a = ap.parse_args()
    if (a.file is None) == (a.tokens_file is None):
        sys.exit("llamacpp_ppl: give exactly one of --file and --tokens-file")
    llm = load(a.model, a.ctx, a.threads, logits_all=True)
    if a.file:
        with open(a.file, encoding="utf-8") as f:
            tokens = tokenize_text(llm, f.read())
    else:
        with open(a.tokens_file) as f:
            tokens = [int(w) for w in f.read().split()]
    if a.tokens_out:
        with open(a.tokens_out, "w") as f:
            f.write(" ".join(map(str, tokens)) + "\n")
    nll, scored = window_nll(llm, tokens, a.ctx)
    print(json.dumps({"ppl": math.exp(nll / scored) if scored else 0.0, "tokens": len(tokens), "scored": scored}))


if __name__ == "__main__":
    main()
