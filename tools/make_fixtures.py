#!/usr/bin/env python3
"""Writes the conformance fixtures under tests/fixtures/models/: tiny random-weight HF models
(Llama GQA untied, Llama with 5 heads + llama3 RoPE scaling tied, Qwen2 with q/k/v bias tied,
GPT-2), their reference logits and greedy tokens from transformers, llama_gqa converted to GGUF
(f32 and q8_0, llama.cpp conventions incl. the Q/K row permutation), and training references
(loss, gradients, params after 3 AdamW steps) for llama_gqa and gpt2.

Run: PY=$(tools/venv.sh) && "$PY" tools/make_fixtures.py [--out tests/fixtures/models]
Deterministic: same seeds, same files (up to torch/transformers versions, recorded in meta.json).
References are computed in float64 and stored as float32. Layouts: tests/fixtures/README.md.
"""
import argparse
import copy
import json
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import transformers
import gguf
from safetensors.torch import save_file
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

N_TOKENS = 24          # reference sequence length
N_GREEDY = 8           # greedy continuation length
TRAIN_B, TRAIN_T = 2, 16
ADAMW = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
ADAMW_STEPS = 3

# name -> (seed, model class, config kwargs, config.json style, has training fixture)
# style "v4": rope_theta / rope_scaling at top level (as most hub checkpoints, e.g. SmolLM2);
# style "v5": rope_parameters {rope_type, rope_theta, ...} as transformers >= 5 writes it.
SPECS = {
    "llama_gqa": (1001, LlamaForCausalLM, LlamaConfig, dict(
        hidden_size=96, num_attention_heads=6, num_key_value_heads=2, head_dim=16,
        intermediate_size=96, num_hidden_layers=2, vocab_size=256, rope_theta=10000.0,
        tie_word_embeddings=False, rms_norm_eps=1e-5, max_position_embeddings=128,
        hidden_act="silu"), "v4", True),
    "llama_odd": (1002, LlamaForCausalLM, LlamaConfig, dict(
        hidden_size=80, num_attention_heads=5, num_key_value_heads=1, head_dim=16,
        intermediate_size=136, num_hidden_layers=2, vocab_size=250, rope_theta=10000.0,
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                          high_freq_factor=4.0, original_max_position_embeddings=32),
        tie_word_embeddings=True, rms_norm_eps=1e-5, max_position_embeddings=128,
        hidden_act="silu"), "v4", False),
    "qwen2_bias": (1003, Qwen2ForCausalLM, Qwen2Config, dict(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
        num_hidden_layers=2, vocab_size=256, rope_theta=1000000.0, tie_word_embeddings=True,
        rms_norm_eps=1e-6, max_position_embeddings=128, use_sliding_window=False,
        hidden_act="silu"), "v5", False),
    "gpt2": (1004, GPT2LMHeadModel, GPT2Config, dict(
        n_embd=64, n_head=4, n_layer=2, n_positions=64, vocab_size=256,
        activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True), "v5", True),
}


def make_config(cfg_cls, kwargs):
    kw = dict(kwargs)
    rope_scaling = kw.pop("rope_scaling", None)
    theta = kw.pop("rope_theta", None)
    if theta is not None:  # transformers 5 keeps RoPE settings in rope_parameters
        rp = {"rope_type": "default", "rope_theta": theta}
        if rope_scaling:
            rp.update(rope_scaling)
        kw["rope_parameters"] = rp
    # No special tokens: greedy generation must run all N_GREEDY steps.
    cfg = cfg_cls(bos_token_id=None, eos_token_id=None, pad_token_id=None, **kw)
    return cfg


def init_weights(model, seed, conv1d_layout):
    """Deterministic init with O(1) activations and logits (HF's std 0.02 gives near-uniform
    logits, so greedy margins would be tiny; larger embeddings make tied models repeat one token).
    Linear: N(0, 1.5^2/fan_in); embeddings: N(0, 0.2^2); norm weights 1 + N(0, 0.1^2);
    biases N(0, 0.1^2); untied lm_head N(0, 1/hidden) (larger makes Adam updates of tiny
    lm_head gradients ill-conditioned)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if name.endswith("bias"):
                v = 0.1 * r
            elif p.dim() == 1:                       # RMSNorm / LayerNorm weight
                v = 1.0 + 0.1 * r
            elif "embed" in name or name.split(".")[-2] in ("wte", "wpe"):
                v = 0.2 * r
            elif name.startswith("lm_head"):
                v = 1.0 * r / p.shape[1] ** 0.5
            else:
                fan_in = p.shape[0] if conv1d_layout else p.shape[1]
                v = 1.5 * r / fan_in ** 0.5
            p.copy_(v.to(p.dtype))


def rewrite_config_v4(path):
    """Rewrites config.json with rope_theta / rope_scaling at top level (transformers 4 style)."""
    c = json.loads(path.read_text())
    rp = c.pop("rope_parameters")
    c["rope_theta"] = rp.pop("rope_theta")
    c["rope_scaling"] = rp if rp.get("rope_type", "default") != "default" else None
    if "dtype" in c:
        c["torch_dtype"] = c.pop("dtype")
    path.write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")


def safetensors_shapes(path):
    from safetensors import safe_open
    with safe_open(str(path), "pt") as f:
        return {k: list(f.get_slice(k).get_shape()) for k in f.keys()}


def write_ids(path, rows):
    path.write_text("".join(" ".join(str(int(t)) for t in row) + "\n" for row in rows))


def write_f32(path, arr):
    np.ascontiguousarray(arr, dtype="<f4").tofile(path)


def greedy_no_cache(model, ids, n):
    """Greedy decoding by full recomputation; returns new ids and the smallest top1-top2 gap."""
    seq = ids.clone()
    margin = float("inf")
    with torch.no_grad():
        for _ in range(n):
            last = model(seq[None]).logits[0, -1]
            top2 = torch.topk(last, 2).values
            margin = min(margin, float(top2[0] - top2[1]))
            seq = torch.cat([seq, last.argmax().view(1)])
    return seq[len(ids):], margin


def reference_outputs(model64, model32, ids, out_dir, prefix=""):
    """Writes logits (float64 compute, stored f32) and returns metadata."""
    with torch.no_grad():
        l64 = model64(ids[None]).logits[0]
        l32 = model32(ids[None]).logits[0]
    write_f32(out_dir / f"{prefix}logits.bin", l64.numpy())
    return {"logits_shape": list(l64.shape), "logits_abs_max": float(l64.abs().max()),
            "torch_f32_vs_f64_max_abs_diff": float((l32.double() - l64).abs().max())}


# ---------------------------------------------------------------------------------------------
# GGUF export (llama arch), following llama.cpp's conventions.

def to_gguf_rope_order(w, n_heads):
    """HF q_proj/k_proj rows are, per head, [first halves of the rotary pairs; second halves]
    (rotate_half / NeoX pairing (i, i + d/2)). llama.cpp's llama arch rotates adjacent rows
    (2i, 2i+1), so the converter reorders each head's rows: GGUF row 2i + j <- HF row j*d/2 + i
    (j in {0, 1}, i in [0, d/2)). Works for a weight (rows, cols) or a bias (rows,)."""
    rows = w.shape[0]
    d = rows // n_heads
    x = w.reshape(n_heads, 2, d // 2, *w.shape[1:])
    return x.swapaxes(1, 2).reshape(w.shape)


def from_gguf_rope_order(w, n_heads):
    """Inverse of to_gguf_rope_order: HF row j*d/2 + i <- GGUF row 2i + j."""
    rows = w.shape[0]
    d = rows // n_heads
    x = w.reshape(n_heads, d // 2, 2, *w.shape[1:])
    return x.swapaxes(1, 2).reshape(w.shape)


def check_permutation_convention(n_heads=3, head_dim=8, n_in=5, theta=10000.0, pos=7):
    """Self-test: NeoX RoPE (pairs (i, i+d/2)) on HF-ordered q equals, after to_gguf_rope_order,
    the interleaved RoPE (pairs (2i, 2i+1)) that llama.cpp's llama arch applies to GGUF-ordered q."""
    g = torch.Generator().manual_seed(5)
    wq = torch.randn(n_heads * head_dim, n_in, generator=g, dtype=torch.float64)
    x = torch.randn(n_in, generator=g, dtype=torch.float64)
    half = head_dim // 2
    ang = pos * theta ** (-torch.arange(half, dtype=torch.float64) * 2 / head_dim)
    c, s = torch.cos(ang), torch.sin(ang)
    q = (wq @ x).view(n_heads, head_dim)
    a, b = q[:, :half], q[:, half:]
    hf = torch.cat([a * c - b * s, b * c + a * s], dim=1).reshape(-1)
    qg = (torch.from_numpy(to_gguf_rope_order(wq.numpy(), n_heads)) @ x).view(n_heads, half, 2)
    a, b = qg[..., 0], qg[..., 1]
    gg = torch.stack([a * c - b * s, b * c + a * s], dim=-1).reshape(-1)
    assert torch.allclose(torch.from_numpy(to_gguf_rope_order(hf.view(-1, 1).numpy(), n_heads)).view(-1), gg)
    assert np.array_equal(from_gguf_rope_order(to_gguf_rope_order(wq.numpy(), n_heads), n_heads), wq.numpy())


def gguf_tensor_map(cfg):
    m = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
         "lm_head.weight": "output.weight"}
    per = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
           "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
           "self_attn.o_proj.weight": "attn_output.weight",
           "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
           "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}
    for b in range(cfg.num_hidden_layers):
        for k, v in per.items():
            m[f"model.layers.{b}.{k}"] = f"blk.{b}.{v}"
    return m


def byte_tokens():
    """GPT-2 byte-to-unicode table: token i is the printable stand-in for byte i."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


# GGUF variants of llama_gqa: name -> (file_type, type of token_embd/output, type of block weights).
# "q4_1" mirrors the default model (SmolLM2 Q4_1: embedding Q8_0, block weights Q4_1, norms F32).
Q = gguf.GGMLQuantizationType
GGUF_VARIANTS = {
    "f16": (gguf.LlamaFileType.MOSTLY_F16, Q.F16, Q.F16),
    "q4_1": (gguf.LlamaFileType.MOSTLY_Q4_1, Q.Q8_0, Q.Q4_1),
}


def encode_tensor(t, qtype):
    """Returns (array for GGUFWriter.add_tensor, raw_dtype, float64 array of what the file holds)."""
    if qtype == Q.F32:
        return t, None, t.astype(np.float64)
    if qtype == Q.F16:
        h = t.astype(np.float16)
        return h, None, h.astype(np.float64)
    q = gguf.quants.quantize(t, qtype)
    return q, qtype, gguf.quants.dequantize(q, qtype).reshape(t.shape).astype(np.float64)


def write_gguf(model, cfg, name, path, variant):
    """Writes model (LlamaForCausalLM, f32) as GGUF v3 following llama.cpp's llama conventions;
    1-D tensors (norms) stay F32. Returns {hf_name: float64 array in HF layout} of what the file
    holds after dequantization (to compute reference logits of exactly these weights)."""
    file_type, embd_type, block_type = GGUF_VARIANTS[variant]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(file_type)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(byte_tokens())
    w.add_token_types([gguf.TokenType.NORMAL] * 256)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    held = {}
    sd = {k: v.detach().to(torch.float32).numpy() for k, v in model.state_dict().items()}
    for hf_name, g_name in gguf_tensor_map(cfg).items():
        t = sd[hf_name]
        if hf_name.endswith("q_proj.weight"):
            t = to_gguf_rope_order(t, cfg.num_attention_heads)
        elif hf_name.endswith("k_proj.weight"):
            t = to_gguf_rope_order(t, cfg.num_key_value_heads)
        t = np.ascontiguousarray(t, dtype=np.float32)
        if t.ndim == 1:
            qtype = Q.F32
        elif g_name in ("token_embd.weight", "output.weight"):
            qtype = embd_type
        else:
            qtype = block_type
        data, raw_dtype, back = encode_tensor(t, qtype)
        # GGUFWriter stores numpy shape (rows, cols) as ne = [cols, rows] (GGUF's reversed dims).
        w.add_tensor(g_name, data, raw_dtype=raw_dtype)
        if hf_name.endswith("q_proj.weight"):
            back = from_gguf_rope_order(back, cfg.num_attention_heads)
        elif hf_name.endswith("k_proj.weight"):
            back = from_gguf_rope_order(back, cfg.num_key_value_heads)
        held[hf_name] = back
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return held


def check_gguf_roundtrip(path, cfg):
    """Reads the file back with gguf.GGUFReader: names, ne order, types."""
    r = gguf.GGUFReader(str(path))
    got = {t.name: (list(map(int, t.shape)), t.tensor_type.name) for t in r.tensors}
    assert got["blk.0.attn_q.weight"][0] == [cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim], got
    assert got["blk.0.attn_k.weight"][0] == [cfg.hidden_size, cfg.num_key_value_heads * cfg.head_dim], got
    assert got["token_embd.weight"][0] == [cfg.hidden_size, cfg.vocab_size], got
    return got


# ---------------------------------------------------------------------------------------------
# Training references.

def loss_fn(model, inputs, targets):
    logits = model(inputs).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def analytic_zero_grads(model):
    """Entries whose exact gradient is zero: GPT-2's key bias (c_attn.bias[C:2C]) adds the same
    q.b_k to every score of a softmax row. Rounding noise there (~1e-9 in f32, ~1e-17 in f64) is
    amplified by Adam to +-lr updates of random sign, so the reference zeroes them exactly."""
    out = []
    if isinstance(model, GPT2LMHeadModel):
        C = model.config.n_embd
        for b in range(model.config.n_layer):
            out.append((f"transformer.h.{b}.attn.c_attn.bias", slice(C, 2 * C)))
    return out


def training_fixture(model32, seed, vocab, out_dir):
    g = torch.Generator().manual_seed(seed + 77)
    data = torch.randint(0, vocab, (TRAIN_B, TRAIN_T + 1), generator=g)
    inputs, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    write_ids(out_dir / "train_inputs.txt", inputs.tolist())
    write_ids(out_dir / "train_targets.txt", targets.tolist())

    def run(model):
        model.train()
        opt = torch.optim.AdamW(model.parameters(), **ADAMW)
        params_by_name = dict(model.named_parameters())
        losses, grads = [], None
        for step in range(ADAMW_STEPS):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model, inputs, targets)
            loss.backward()
            with torch.no_grad():
                for pname, sl in analytic_zero_grads(model):
                    params_by_name[pname].grad[sl] = 0.0
            if step == 0:
                grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
            losses.append(loss.item())
            opt.step()
        with torch.no_grad():
            final_loss = float(loss_fn(model, inputs, targets))
        params = {n: p.detach().clone() for n, p in model.named_parameters()}
        return losses, final_loss, grads, params

    losses, final_loss, grads, params = run(copy.deepcopy(model32).double())
    losses32, _, grads32, params32 = run(copy.deepcopy(model32))
    to32 = lambda d: {n: t.to(torch.float32).contiguous() for n, t in d.items()}
    save_file(to32(grads), str(out_dir / "grads.safetensors"))
    save_file(to32(params), str(out_dir / "params_after_3_steps.safetensors"))

    def rel(a, b):
        return max(float((a[n].double() - b[n]).norm() / max(b[n].norm(), 1e-30)) for n in b)
    meta = {
        "batch": TRAIN_B, "seq": TRAIN_T, "inputs_file": "train_inputs.txt",
        "targets_file": "train_targets.txt",
        "loss": "mean cross-entropy over all B*T positions, F.cross_entropy(logits.view(-1,V), targets.view(-1))",
        "optimizer": "torch.optim.AdamW, one param group (weight decay on every parameter), no clipping, "
                     "no LR schedule, same batch every step",
        "adamw": {"lr": ADAMW["lr"], "beta1": ADAMW["betas"][0], "beta2": ADAMW["betas"][1],
                  "eps": ADAMW["eps"], "weight_decay": ADAMW["weight_decay"]},
        "steps": ADAMW_STEPS,
        "losses": losses, "loss_after_steps": final_loss,
        "grads_file": "grads.safetensors (gradients at the initial parameters, step 1)",
        "params_file": "params_after_3_steps.safetensors",
        "parameters": {n: list(t.shape) for n, t in grads.items()},
        "compute": "float64, stored float32",
        "analytic_zero_grads": {n: [sl.start, sl.stop] for n, sl in analytic_zero_grads(model32)},
        "torch_f32_vs_f64": {"losses_f32": losses32,
                             "max_norm_rel_diff_grads": rel(grads32, grads),
                             "max_norm_rel_diff_params": rel(params32, params)},
    }
    (out_dir / "train.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


# ---------------------------------------------------------------------------------------------

def make_one(name, out_root):
    seed, model_cls, cfg_cls, kwargs, style, train = SPECS[name]
    out = out_root / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cfg = make_config(cfg_cls, kwargs)
    torch.manual_seed(seed)
    model = model_cls(cfg).to(torch.float32).eval()
    init_weights(model, seed, conv1d_layout=(model_cls is GPT2LMHeadModel))
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    model.save_pretrained(out, safe_serialization=True)
    gen_cfg = out / "generation_config.json"
    if gen_cfg.exists():
        gen_cfg.unlink()
    if style == "v4":
        rewrite_config_v4(out / "config.json")

    # The saved directory must load back to the same model (also checks the v4 rewrite).
    loaded = model_cls.from_pretrained(out, dtype=torch.float32).eval()
    m64 = copy.deepcopy(loaded).double()

    g = torch.Generator().manual_seed(seed + 1)
    vocab = cfg.vocab_size
    ids = torch.randint(0, vocab, (N_TOKENS,), generator=g)
    write_ids(out / "tokens.txt", [ids.tolist()])
    meta = {"name": name, "architecture": type(model).__name__, "seed": seed,
            "tokens_file": "tokens.txt", "n_tokens": N_TOKENS, "vocab_size": vocab,
            "logits_file": "logits.bin", "logits_dtype": "float32 little-endian, row-major [tokens, vocab]",
            "reference_compute": "float64 (transformers), stored float32",
            "torch": torch.__version__, "transformers": transformers.__version__}
    meta.update(reference_outputs(m64, loaded, ids, out))
    with torch.no_grad():
        gen = loaded.generate(ids[None], max_new_tokens=N_GREEDY, do_sample=False, num_beams=1,
                              eos_token_id=None, pad_token_id=0)[0, N_TOKENS:]
    mine, margin = greedy_no_cache(m64, ids, N_GREEDY)
    assert gen.tolist() == mine.tolist(), (name, gen.tolist(), mine.tolist())
    write_ids(out / "greedy.txt", [gen.tolist()])
    meta.update({"greedy_file": "greedy.txt", "greedy_new_tokens": N_GREEDY,
                 "greedy_min_top1_top2_margin": margin,
                 "n_params": sum(p.numel() for p in loaded.parameters()),
                 "tensors": safetensors_shapes(out / "model.safetensors")})
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"{name}: logits |max| {meta['logits_abs_max']:.3f}, greedy {gen.tolist()}, "
          f"min margin {margin:.4f}, f32-vs-f64 {meta['torch_f32_vs_f64_max_abs_diff']:.2e}")

    if train:
        tm = training_fixture(loaded, seed, vocab, out)
        print(f"{name}: train losses {tm['losses']} -> {tm['loss_after_steps']:.5f}, "
              f"f32-vs-f64 grads {tm['torch_f32_vs_f64']['max_norm_rel_diff_grads']:.2e}")
    return loaded, ids


def make_gguf(model, ids, out_root):
    cfg = model.config
    out = out_root / "llama_gqa_gguf"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    write_ids(out / "tokens.txt", [ids.tolist()])
    meta = {"source": "llama_gqa", "tokens_file": "tokens.txt",
            "reference": "logits-<variant>.bin: transformers in float64 on the weights the file holds "
                         "(dequantized, Q/K permutation undone), stored float32",
            "files": {}}
    with torch.no_grad():
        ref_logits = copy.deepcopy(model).double()(ids[None]).logits[0]
    for qname in GGUF_VARIANTS:
        path = out / f"model-{qname}.gguf"
        held = write_gguf(model, cfg, "llama_gqa", path, qname)
        types = check_gguf_roundtrip(path, cfg)
        m = copy.deepcopy(model).double()
        m.load_state_dict({k: torch.from_numpy(v) for k, v in held.items()})
        with torch.no_grad():
            logits = m(ids[None]).logits[0]
        write_f32(out / f"logits-{qname}.bin", logits.numpy())
        gen, margin = greedy_no_cache(m, ids, N_GREEDY)
        write_ids(out / f"greedy-{qname}.txt", [gen.tolist()])
        meta["files"][path.name] = {
            "logits_file": f"logits-{qname}.bin", "greedy_file": f"greedy-{qname}.txt",
            "logits_shape": list(logits.shape),
            "max_abs_diff_vs_llama_gqa_logits": float((logits - ref_logits).abs().max()),
            "greedy_min_top1_top2_margin": margin,
            "tensors": {k: {"ne": v[0], "type": v[1]} for k, v in types.items()}}
        print(f"gguf {qname}: {path.stat().st_size} bytes, greedy {gen.tolist()}, "
              f"max |logits - llama_gqa| {meta['files'][path.name]['max_abs_diff_vs_llama_gqa_logits']:.3e}")
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/models"))
    ap.add_argument("--only", nargs="*", default=None, help="subset of " + ", ".join(SPECS))
    args = ap.parse_args()
    torch.set_num_threads(2)
    check_permutation_convention()
    out_root = Path(args.out)
    out_root.mkdir(parents=True, exist_ok=True)
    for name in args.only or SPECS:
        model, ids = make_one(name, out_root)
        if name == "llama_gqa":
            make_gguf(model, ids, out_root)
    total = sum(p.stat().st_size for p in out_root.rglob("*") if p.is_file())
    print(f"total fixture bytes under {out_root}: {total}")


if __name__ == "__main__":
    main()
