#!/usr/bin/env python3
"""Naive float64 numpy forward of a llama-arch GGUF file with llama.cpp's own conventions
(GGUF tensors as stored: interleaved RoPE on adjacent rows (2i, 2i+1), no Q/K permutation undone).
An independent check of the GGUF fixtures (tools/make_fixtures.py builds their references from the
HF model instead) and a reference for the default model. No llama3 RoPE scaling support.

Usage: gguf_reference.py MODEL.gguf (--tokens "1 2 3" | --tokens-file IDS) [--compare LOGITS.bin]
       [--greedy N] [--top K] [--json OUT] [--activations f32|int8]
--json writes {"model", "tokens", "greedy", "top": [[[id, logit], ...] per position]} (top K, default 5),
"nll": the mean negative log-likelihood of each prompt token after the first.
--activations int8: every matmul with a weight of a type the engine's int8 kernel covers first
rounds its input rows to 8 bits per block, by the rule of src/kernels/cpu/int8_matmul.h (legacy
types: blocks of 32, scale max|x|/127 rounded to f16; K-quants: blocks of 256, scale -max/127 with
max the element of largest magnitude), computed in float32 as the engine does; the product is then
float64 on the rounded activations.
"""
import json
import argparse
import sys

import numpy as np
import gguf


def field(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    v = f.parts[f.data[0]]
    if f.types and f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(v).decode()
    return v[0].item()


LEGACY_INT8 = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL"}
KQUANT_INT8 = {"Q4_K", "Q5_K", "Q6_K"}


def round_int8(x, kquant):
    """Rows of x rounded to 8 bits per block and dequantized (float64)."""
    x32 = np.asarray(x, dtype=np.float32)
    T, K = x32.shape
    if not kquant:
        b = x32.reshape(T, K // 32, 32)
        d = np.abs(b).max(-1, keepdims=True) / np.float32(127)
        inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
        q = np.rint(b * inv)
        return (q * d.astype(np.float16).astype(np.float64)).reshape(T, K)
    b = x32.reshape(T, K // 256, 256)
    mx = np.take_along_axis(b, np.abs(b).argmax(-1)[..., None], -1)
    safe = np.where(mx != 0, mx, np.float32(1))
    iscale = np.where(mx != 0, np.float32(-127) / safe, np.float32(0)).astype(np.float32)
    q = np.minimum(127, np.rint(iscale * b))
    d = np.where(mx != 0, np.float32(1) / np.where(iscale != 0, iscale, np.float32(1)), np.float32(0)).astype(np.float32)
    return (q * d.astype(np.float64)).reshape(T, K)


class Weights(dict):
    """Dequantized float64 weights, with each tensor's GGUF type; mm(x, name) = x @ W^T, the
    input rounded to 8 bits first when int8 activations are on and the type has the kernel."""
    int8 = False

    def mm(self, x, name):
        t = self.types[name]
        if self.int8 and (t in LEGACY_INT8 or t in KQUANT_INT8):
            x = round_int8(x, t in KQUANT_INT8)
        return x @ self[name].T


def load(path):
    r = gguf.GGUFReader(path)
    assert field(r, "general.architecture") == "llama", "only llama arch"
    hp = {k: field(r, "llama." + k) for k in (
        "embedding_length", "block_count", "attention.head_count", "attention.head_count_kv",
        "attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.dimension_count")}
    w = Weights()
    w.types = {}
    for t in r.tensors:
        w.types[t.name] = t.tensor_type.name
        a = gguf.quants.dequantize(t.data, t.tensor_type)
        ne = [int(x) for x in t.shape]           # GGUF order: ne[0] = contiguous (columns)
        w[t.name] = np.asarray(a, dtype=np.float64).reshape(list(reversed(ne)) if len(ne) > 1 else ne)
    return hp, w


def rms_norm(x, g, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def rope_interleaved(x, theta, n_rot):
    """x: (T, H, D). Rotates pairs (2i, 2i+1) by pos * theta^(-2i/n_rot) (llama.cpp mode 0)."""
    t = np.arange(x.shape[0], dtype=np.float64)[:, None]
    ang = t * theta ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)   # (T, n_rot/2)
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    y = x.copy()
    a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
    y[..., 0:n_rot:2] = a * c - b * s
    y[..., 1:n_rot:2] = a * s + b * c
    return y


def forward(hp, w, ids):
    C, L = hp["embedding_length"], hp["block_count"]
    H, KV = hp["attention.head_count"], hp["attention.head_count_kv"]
    eps, theta = hp["attention.layer_norm_rms_epsilon"], hp["rope.freq_base"]
    D = C // H
    n_rot = hp["rope.dimension_count"] or D
    T = len(ids)
    x = w["token_embd.weight"][ids]                                    # (T, C)
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for b in range(L):
        p = f"blk.{b}."
        h = rms_norm(x, w[p + "attn_norm.weight"], eps)
        q = w.mm(h, p + "attn_q.weight").reshape(T, H, D)
        k = w.mm(h, p + "attn_k.weight").reshape(T, KV, D)
        v = w.mm(h, p + "attn_v.weight").reshape(T, KV, D)
        q, k = rope_interleaved(q, theta, n_rot), rope_interleaved(k, theta, n_rot)
        k, v = np.repeat(k, H // KV, axis=1), np.repeat(v, H // KV, axis=1)   # head h uses kv h // (H/KV)
        att = np.einsum("thd,shd->hts", q, k) / np.sqrt(D) + mask
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", att, v).reshape(T, H * D)
        x = x + w.mm(o, p + "attn_output.weight")
        h = rms_norm(x, w[p + "ffn_norm.weight"], eps)
        gate, up = w.mm(h, p + "ffn_gate.weight"), w.mm(h, p + "ffn_up.weight")
        x = x + w.mm(gate / (1 + np.exp(-gate)) * up, p + "ffn_down.weight")
    x = rms_norm(x, w["output_norm.weight"], eps)
    return w.mm(x, "output.weight" if "output.weight" in w else "token_embd.weight")  # (T, V), tied when absent


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--tokens")
    ap.add_argument("--tokens-file")
    ap.add_argument("--compare", help="float32 [T, V] logits file to compare against")
    ap.add_argument("--greedy", type=int, default=0)
    ap.add_argument("--top", type=int, default=0)
    ap.add_argument("--json", help="write tokens, greedy ids and per-position top-k logits here")
    ap.add_argument("--activations", choices=["f32", "int8"], default="f32",
                    help="int8: round matmul inputs to 8 bits as the engine's int8 kernel does")
    a = ap.parse_args()
    text = a.tokens if a.tokens is not None else open(a.tokens_file).read()
    ids = [int(t) for t in text.split()]
    hp, w = load(a.model)
    w.int8 = a.activations == "int8"
    logits = forward(hp, w, ids)
    print(f"logits shape {logits.shape}, |max| {np.abs(logits).max():.4f}")
    if a.top:
        for t in range(len(ids)):
            top = np.argsort(-logits[t])[:a.top]
            print(t, ids[t], [(int(i), round(float(logits[t, i]), 4)) for i in top])
    greedy = []
    if a.greedy:
        seq = list(ids)
        for _ in range(a.greedy):
            seq.append(int(forward(hp, w, seq)[-1].argmax()))
        greedy = seq[len(ids):]
        print("greedy:", " ".join(map(str, greedy)))
    if a.json:
        k = a.top or 5
        top = [[[int(i), float(logits[t, i])] for i in np.argsort(-logits[t])[:k]] for t in range(len(ids))]
        compute = "float64 numpy on dequantized GGUF weights" + (
            ", matmul inputs rounded to 8 bits per block (int8_matmul.h)" if w.int8 else "")
        prev = logits[:-1]
        m = prev.max(-1)
        lse = m + np.log(np.exp(prev - m[:, None]).sum(-1))
        nll = float(np.mean(lse - prev[np.arange(len(ids) - 1), ids[1:]])) if len(ids) > 1 else 0.0
        doc = {"model": a.model.split("/")[-1], "compute": compute,
               "tokens": ids, "greedy": greedy, "top": top, "nll": nll}
        with open(a.json, "w") as f:
            json.dump(doc, f)
            f.write("\n")
    if a.compare:
        ref = np.fromfile(a.compare, dtype="<f4").reshape(logits.shape)
        err = float(np.abs(ref - logits).max())
        print(f"max |logits - {a.compare}| = {err:.3e}")
        if err > 1e-4:
            sys.exit(1)


if __name__ == "__main__":
    main()
