#!/usr/bin/env python3
"""Writes the mixture-of-experts (and Qwen3) conformance fixtures under tests/fixtures/models/, in
the layout of tools/make_fixtures.py (tiny random-weight HF models, float64 references):

- mixtral_tiny: MixtralForCausalLM, hidden 64, 4 heads / 2 kv heads (head_dim 16), 2 layers,
  vocab 256, 5 experts (deliberately not a power of two), top-2, expert ffn 48, untied; softmax ->
  top-k -> the k weights renormalised to sum 1. Training fixture + aux_loss.json.
- qwen2_moe_tiny: Qwen2MoeForCausalLM, hidden 64, 4/2 heads, 3 layers, vocab 256, 6 experts, top-2,
  expert ffn 32, shared expert ffn 48 (sigmoid-gated), norm_topk_prob false (raw softmax weights),
  mlp_only_layers [1]: layer 1 is a dense SwiGLU MLP with ffn 80; q/k/v bias; tied embeddings.
  Training fixture + aux_loss.json.
- qwen3_tiny: Qwen3ForCausalLM (dense; per-head RMSNorm on q and k), hidden 64, 4/2 heads,
  head_dim 32 (not hidden/heads), 2 layers, vocab 256, ffn 96, tied. No training fixture.
- qwen3_moe_tiny: Qwen3MoeForCausalLM, hidden 64, 4/2 heads, head_dim 16, 2 layers, vocab 256,
  8 experts, top-3, expert ffn 24, norm_topk_prob true, untied. Training fixture + aux_loss.json.

Files per model as make_fixtures.py writes them (config.json, model.safetensors, tokens.txt,
logits.bin, greedy.txt, meta.json; training: train_inputs.txt, train_targets.txt, grads.safetensors,
params_after_3_steps.safetensors, train.json), plus for the MoE training fixtures aux_loss.json and
grads_with_aux.safetensors (gradient of CE + 0.02 * transformers' load-balancing loss).

Differences from make_fixtures.make_one, all checked by asserts here:
- config.json is rewritten as the hub checkpoints of each family have it (Mixtral-8x7B,
  Qwen1.5-MoE / Qwen2-57B-A14B, Qwen3-0.6B, Qwen3-30B-A3B): top-level rope_theta, torch_dtype,
  num_experts (Qwen3-MoE; transformers 5 writes num_local_experts), no transformers-5-only keys;
  transformers must load it back to the same model (identical logits).
- transformers 5 keeps experts fused in memory (mlp.experts.gate_up_proj [E, 2F, C] = [gate; up],
  mlp.experts.down_proj [E, C, F]); save_pretrained writes the hub layout, one tensor per expert
  (Mixtral: block_sparse_moe.experts.{e}.w1 (gate) / w3 (up) / w2 (down), block_sparse_moe.gate;
  Qwen: mlp.experts.{e}.gate_proj / up_proj / down_proj, mlp.gate). grads*.safetensors and
  params_after_3_steps.safetensors use the same hub names and shapes as model.safetensors.
- Attention and experts run "eager" (also after from_pretrained, which defaults to sdpa/grouped_mm).
- transformers computes the router softmax in float32 even in a float64 model; the float64
  references patch the routers to keep the model dtype (a no-op for float32 models: asserted
  bit-identical), so references are float64 throughout. The same for the aux loss (re-implemented
  in float64, checked against transformers' value).
- Expert tensors are 3-D, so make_fixtures.init_weights would take the wrong fan-in; they are
  redrawn as per-expert Linear layers (N(0, 1.5^2/fan_in), fan_in = last dim).

Run: PY=$(tools/venv.sh) && "$PY" tools/make_moe_fixtures.py [--out tests/fixtures/models] [--only NAME...]
Deterministic: same seeds, same files. Layouts: tests/fixtures/README.md.
"""
import argparse
import copy
import inspect
import json
import shutil
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import (MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)
from transformers.models.mixtral import modeling_mixtral
from transformers.models.qwen2_moe import modeling_qwen2_moe
from transformers.models.qwen3_moe import modeling_qwen3_moe

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402  (the shared fixture writer)

AUX_COEF = 0.02        # router_aux_loss_coef used for aux_loss.json (Mixtral-8x7B's value)
MIN_ROUTER_GAP = 1e-4  # smallest allowed gap between the k-th and (k+1)-th router probability

COMMON = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
              max_position_embeddings=128, hidden_act="silu", rope_theta=1000000.0,
              attn_implementation="eager")
MOE_IMPL = dict(experts_implementation="eager")

# name -> (seed, model class, config class, config kwargs, config.json style, training fixture)
SPECS = {
    "mixtral_tiny": (1029, MixtralForCausalLM, MixtralConfig, dict(
        COMMON, **MOE_IMPL, head_dim=16, num_hidden_layers=2, num_local_experts=5,
        num_experts_per_tok=2, intermediate_size=48, tie_word_embeddings=False, rms_norm_eps=1e-5,
        sliding_window=None, router_aux_loss_coef=0.02, router_jitter_noise=0.0), "hub", True),
    "qwen2_moe_tiny": (1030, Qwen2MoeForCausalLM, Qwen2MoeConfig, dict(
        COMMON, **MOE_IMPL, num_hidden_layers=3, num_experts=6, num_experts_per_tok=2,
        moe_intermediate_size=32, shared_expert_intermediate_size=48, intermediate_size=80,
        norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1], tie_word_embeddings=True,
        rms_norm_eps=1e-6, use_sliding_window=False, router_aux_loss_coef=0.001), "hub", True),
    "qwen3_tiny": (1054, Qwen3ForCausalLM, Qwen3Config, dict(
        COMMON, head_dim=32, num_hidden_layers=2, intermediate_size=96, tie_word_embeddings=True,
        rms_norm_eps=1e-6, use_sliding_window=False, attention_bias=False), "hub", False),
    "qwen3_moe_tiny": (1061, Qwen3MoeForCausalLM, Qwen3MoeConfig, dict(
        COMMON, **MOE_IMPL, head_dim=16, num_hidden_layers=2, num_experts=8, num_experts_per_tok=3,
        moe_intermediate_size=24, intermediate_size=96, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[], tie_word_embeddings=False, rms_norm_eps=1e-6, use_sliding_window=False,
        attention_bias=False, router_aux_loss_coef=0.001), "hub", True),
}


# ---------------------------------------------------------------------------------------------
# Routers in the model dtype (float64 references).

def _mixtral_router_forward(self, hidden_states):
    """MixtralTopKRouter.forward without the .float() cast (identical for float32 models)."""
    hidden_states = hidden_states.reshape(-1, self.hidden_dim)
    router_logits = F.linear(hidden_states, self.weight)
    router_probs = torch.nn.functional.softmax(router_logits, dim=-1)
    router_top_value, router_indices = torch.topk(router_probs, self.top_k, dim=-1)
    router_top_value /= router_top_value.sum(dim=-1, keepdim=True)
    return router_logits, router_top_value, router_indices


def _qwen_router_forward(self, hidden_states):
    """Qwen2Moe/Qwen3MoeTopKRouter.forward with the softmax in the logits' dtype instead of float32."""
    hidden_states = hidden_states.reshape(-1, self.hidden_dim)
    router_logits = F.linear(hidden_states, self.weight)
    router_probs = torch.nn.functional.softmax(router_logits, dim=-1)
    router_top_value, router_indices = torch.topk(router_probs, self.top_k, dim=-1)
    if self.norm_topk_prob:
        router_top_value /= router_top_value.sum(dim=-1, keepdim=True)
    router_top_value = router_top_value.to(router_logits.dtype)
    return router_logits, router_top_value, router_indices


ROUTERS = [(modeling_mixtral.MixtralTopKRouter, _mixtral_router_forward),
           (modeling_qwen2_moe.Qwen2MoeTopKRouter, _qwen_router_forward),
           (modeling_qwen3_moe.Qwen3MoeTopKRouter, _qwen_router_forward)]
ORIGINAL_ROUTER_FORWARD = {cls: cls.forward for cls, _ in ROUTERS}


def set_router_patch(on):
    for cls, fwd in ROUTERS:
        cls.forward = fwd if on else ORIGINAL_ROUTER_FORWARD[cls]


# ---------------------------------------------------------------------------------------------
# Structure helpers.

def is_moe(model):
    return isinstance(model, (MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM))


def moe_layers(model):
    return [i for i, layer in enumerate(model.model.layers)
            if hasattr(layer.mlp, "gate") and hasattr(layer.mlp, "experts")]


def router_info(model):
    cfg = model.config
    mixtral = isinstance(model, MixtralForCausalLM)
    E = cfg.num_local_experts if mixtral else cfg.num_experts
    renorm = True if mixtral else bool(cfg.norm_topk_prob)
    return E, cfg.num_experts_per_tok, renorm


def moe_init_weights(model, seed):
    """make_fixtures.init_weights, then the fused 3-D expert tensors redrawn as the per-expert
    Linear layers they are: N(0, 1.5^2 / fan_in), fan_in = last dim (C for gate_up_proj [E,2F,C],
    F for down_proj [E,C,F]); init_weights would take dim 1 as fan-in."""
    mf.init_weights(model, seed, conv1d_layout=False)
    g = torch.Generator().manual_seed(seed + 5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 3:
                r = torch.randn(p.shape, generator=g, dtype=torch.float64)
                p.copy_((1.5 * r / p.shape[-1] ** 0.5).to(p.dtype))


def to_hub(named, mixtral):
    """{transformers 5 in-memory name: tensor} -> {hub checkpoint name: tensor}: fused experts split
    per expert, gate_up_proj[e] rows [0, F) = gate (w1 / gate_proj), [F, 2F) = up (w3 / up_proj)
    (MixtralExperts.forward: gate, up = linear(x, gate_up_proj[e]).chunk(2); act(gate) * up)."""
    out = {}
    for name, t in named.items():
        if name.endswith(".mlp.experts.gate_up_proj"):
            base = name[:-len("experts.gate_up_proj")]
            Fdim = t.shape[1] // 2
            for e in range(t.shape[0]):
                if mixtral:
                    b = base.replace(".mlp.", ".block_sparse_moe.")
                    out[f"{b}experts.{e}.w1.weight"] = t[e, :Fdim]
                    out[f"{b}experts.{e}.w3.weight"] = t[e, Fdim:]
                else:
                    out[f"{base}experts.{e}.gate_proj.weight"] = t[e, :Fdim]
                    out[f"{base}experts.{e}.up_proj.weight"] = t[e, Fdim:]
        elif name.endswith(".mlp.experts.down_proj"):
            base = name[:-len("experts.down_proj")]
            for e in range(t.shape[0]):
                if mixtral:
                    out[f"{base.replace('.mlp.', '.block_sparse_moe.')}experts.{e}.w2.weight"] = t[e]
                else:
                    out[f"{base}experts.{e}.down_proj.weight"] = t[e]
        elif mixtral and name.endswith(".mlp.gate.weight"):
            out[name.replace(".mlp.", ".block_sparse_moe.")] = t
        else:
            out[name] = t
    return {k: v.contiguous() for k, v in out.items()}


def read_safetensors(path):
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def save_hub(path, named, mixtral, model_file):
    """Saves {in-memory name: tensor} under hub names as F32; asserts that names and shapes are
    exactly model.safetensors'."""
    hub = {k: v.to(torch.float32).contiguous() for k, v in to_hub(named, mixtral).items()}
    ref = mf.safetensors_shapes(model_file)
    got = {k: list(v.shape) for k, v in hub.items()}
    assert got == ref, (path, sorted(set(got) ^ set(ref)),
                        [k for k in got if k in ref and got[k] != ref[k]])
    save_file(hub, str(path), metadata={"format": "pt"})


# ---------------------------------------------------------------------------------------------
# config.json as on the hub.

def write_hub_config(path, model_cls):
    """Rewrites transformers 5's config.json into the key set of the family's hub checkpoints:
    rope_theta at top level (Qwen3 also "rope_scaling": null), torch_dtype; Qwen3-MoE's expert count
    as num_experts (transformers 5 writes num_local_experts); no layer_types (derived) and no
    qkv_bias (Qwen2-MoE: always true); Mixtral without head_dim (hub Mixtral has none: hidden/heads)."""
    c = json.loads(path.read_text())
    rp = c.pop("rope_parameters")
    assert rp.get("rope_type", "default") == "default", rp
    c["rope_theta"] = rp["rope_theta"]
    if "dtype" in c:
        c["torch_dtype"] = c.pop("dtype")
    c.pop("layer_types", None)
    if model_cls is MixtralForCausalLM:
        assert c["head_dim"] == c["hidden_size"] // c["num_attention_heads"], c
        c.pop("head_dim")
    if model_cls is Qwen2MoeForCausalLM:
        assert c.pop("qkv_bias") is True
        c["sliding_window"] = None   # unused (use_sliding_window false); transformers writes 0
    if model_cls in (Qwen3ForCausalLM, Qwen3MoeForCausalLM):
        c["rope_scaling"] = None
    if model_cls is Qwen3MoeForCausalLM:
        c["num_experts"] = c.pop("num_local_experts")
    path.write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")
    return c


# ---------------------------------------------------------------------------------------------
# Routing statistics, an independent MoE block, the aux loss in float64.

def routing(router_logits, k):
    """Per MoE layer: (softmax probs [N, E] in the logits' dtype, top-k indices [N, k])."""
    out = []
    for lg in router_logits:
        p = torch.softmax(lg.detach().double(), dim=-1)
        out.append((p, torch.topk(p, k, dim=-1).indices))
    return out


def routing_stats(router_logits, k, E, layers):
    rs = routing(router_logits, k)
    counts, gaps, distinct = {}, [], {}
    for li, (p, idx) in zip(layers, rs):
        counts[str(li)] = torch.bincount(idx.reshape(-1), minlength=E).tolist()
        s = torch.sort(p, dim=-1, descending=True).values
        gaps.append(float((s[:, k - 1] - s[:, k]).min()))
        distinct[str(li)] = len({tuple(sorted(r)) for r in idx.tolist()})
    return {"expert_counts": counts, "min_gap_kth_vs_next": min(gaps), "distinct_topk_sets": distinct,
            "selected": [idx for _, idx in rs]}


def router_logits_of(model, ids):
    with torch.no_grad():
        out = model(ids, output_router_logits=True)
    return out.router_logits


def check_moe_block(model64, hub, ids, mixtral):
    """Recomputes every sparse MoE block of model64 (float64) from the hub tensors of
    model.safetensors, expert by expert and token by token, and compares with the module output."""
    E, k, renorm = router_info(model64)
    seen = {}
    hooks = [model64.model.layers[li].mlp.register_forward_hook(
        lambda mod, inp, out, li=li: seen.__setitem__(li, (inp[0].detach(), out.detach())))
        for li in moe_layers(model64)]
    with torch.no_grad():
        model64(ids)
    for h in hooks:
        h.remove()
    worst = 0.0
    for li, (x, y) in seen.items():
        x = x.reshape(-1, x.shape[-1])
        pre = f"model.layers.{li}.block_sparse_moe." if mixtral else f"model.layers.{li}.mlp."
        w = lambda n: hub[pre + n].double()
        p = torch.softmax(x @ w("gate.weight").T, dim=-1)
        top, idx = torch.topk(p, k, dim=-1)
        if renorm:
            top = top / top.sum(-1, keepdim=True)
        ref = torch.zeros_like(x)
        for t in range(x.shape[0]):
            for j in range(k):
                e = int(idx[t, j])
                names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
                g, u, d = (w(f"experts.{e}.{n}.weight") for n in names)
                ref[t] += top[t, j] * (d @ (F.silu(g @ x[t]) * (u @ x[t])))
        if not mixtral and pre + "shared_expert_gate.weight" in hub:
            sh = w("shared_expert.down_proj.weight") @ (F.silu(w("shared_expert.gate_proj.weight") @ x.T)
                                                         * (w("shared_expert.up_proj.weight") @ x.T))
            ref += torch.sigmoid(x @ w("shared_expert_gate.weight").T) * sh.T
        worst = max(worst, float((ref - y.reshape(ref.shape)).abs().max()))
    assert worst < 1e-12, worst
    return worst


def aux_loss_f64(router_logits, E, k):
    """transformers' load_balancing_loss_func (no attention mask) in the logits' dtype:
    rows of all MoE layers pooled; f_e = (# top-k selections of e) / (L*N), P_e = (sum of softmax
    prob of e) / (L*N); aux = E * sum_e f_e * P_e. Gradient flows through P only."""
    probs = [torch.softmax(lg, dim=-1) for lg in router_logits]
    rows = sum(p.shape[0] for p in probs)
    counts = sum(torch.bincount(torch.topk(p, k, dim=-1).indices.reshape(-1), minlength=E)
                 for p in probs).to(probs[0].dtype)
    psum = sum(p.sum(dim=0) for p in probs)
    return E * torch.sum((counts / rows) * (psum / rows))


def aux_formula_source():
    fn = modeling_mixtral.load_balancing_loss_func
    lines, start = inspect.getsourcelines(fn)
    src = inspect.getsourcefile(fn)
    call = inspect.getsourcelines(MixtralForCausalLM.forward)
    call_line = next(call[1] + i for i, l in enumerate(call[0]) if "load_balancing_loss_func(" in l)
    coef_line = next(call[1] + i for i, l in enumerate(call[0]) if "loss += self.router_aux_loss_coef" in l)
    others = {}
    for mod in (modeling_qwen2_moe, modeling_qwen3_moe):
        o_lines, o_start = inspect.getsourcelines(mod.load_balancing_loss_func)
        assert o_lines == lines, mod.__name__
        others[mod.__name__] = f"{Path(inspect.getsourcefile(mod.load_balancing_loss_func)).name}:" \
                               f"{o_start}-{o_start + len(o_lines) - 1} (identical copy)"
    site = str(Path(transformers.__file__).parent)
    return {"file": src.replace(site, "transformers"), "lines": [start, start + len(lines) - 1],
            "absolute_path_here": src,
            "called_from": f"MixtralForCausalLM.forward, line {call_line} (coef added at line {coef_line})",
            "copies": others}


# ---------------------------------------------------------------------------------------------

def make_moe_one(name, out_root):
    seed, model_cls, cfg_cls, kwargs, style, train = SPECS[name]
    out = out_root / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cfg = mf.make_config(cfg_cls, kwargs)
    torch.manual_seed(seed)
    model = model_cls(cfg).to(torch.float32).eval()
    moe_init_weights(model, seed)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").unlink(missing_ok=True)
    hub_cfg = write_hub_config(out / "config.json", model_cls)
    moe = is_moe(model)
    mixtral = model_cls is MixtralForCausalLM

    # The hub-style config.json must load back to the same model.
    impl = dict(attn_implementation="eager", **(MOE_IMPL if moe else {}))
    loaded = model_cls.from_pretrained(out, dtype=torch.float32, **impl).eval()
    assert loaded.config._attn_implementation == "eager"
    g = torch.Generator().manual_seed(seed + 1)
    vocab = cfg.vocab_size
    ids = torch.randint(0, vocab, (mf.N_TOKENS,), generator=g)
    with torch.no_grad():
        l_mem, l_disk = model(ids[None]).logits, loaded(ids[None]).logits
    assert torch.equal(l_mem, l_disk), float((l_mem - l_disk).abs().max())
    head_dim = lambda c: getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    assert head_dim(loaded.config) == head_dim(model.config)
    for key in ("num_experts_per_tok", "norm_topk_prob", "mlp_only_layers",
                "decoder_sparse_step", "tie_word_embeddings", "num_local_experts", "num_experts",
                "moe_intermediate_size", "shared_expert_intermediate_size", "intermediate_size"):
        if hasattr(model.config, key):
            assert getattr(loaded.config, key) == getattr(model.config, key), key
    assert loaded.config.rope_parameters == model.config.rope_parameters

    # model.safetensors holds the hub layout; the explicit mapping reproduces it exactly.
    disk = read_safetensors(out / "model.safetensors")
    mine = to_hub(dict(loaded.named_parameters()), mixtral)
    assert sorted(mine) == sorted(disk), sorted(set(mine) ^ set(disk))
    for k_, v in mine.items():
        assert torch.equal(v, disk[k_]), k_

    # float64 routers: identical for float32 (patched vs transformers' own forward).
    set_router_patch(False)
    with torch.no_grad():
        l32_orig = loaded(ids[None]).logits
        l64_orig = copy.deepcopy(loaded).double()(ids[None]).logits
    set_router_patch(True)
    with torch.no_grad():
        assert torch.equal(loaded(ids[None]).logits, l32_orig)
    m64 = copy.deepcopy(loaded).double()

    mf.write_ids(out / "tokens.txt", [ids.tolist()])
    meta = {"name": name, "architecture": type(model).__name__, "seed": seed,
            "tokens_file": "tokens.txt", "n_tokens": mf.N_TOKENS, "vocab_size": vocab,
            "logits_file": "logits.bin", "logits_dtype": "float32 little-endian, row-major [tokens, vocab]",
            "reference_compute": "float64 (transformers, eager attention and experts), stored float32",
            "torch": torch.__version__, "transformers": transformers.__version__,
            "config_style": "hub (as the family's hub checkpoints: top-level rope_theta, torch_dtype)",
            "config": {k_: hub_cfg[k_] for k_ in sorted(hub_cfg) if k_ not in ("architectures",)}}
    meta.update(mf.reference_outputs(m64, loaded, ids, out))
    with torch.no_grad():
        l64 = m64(ids[None]).logits
    meta["router_softmax_float32_effect_on_f64_logits"] = float((l64 - l64_orig).abs().max())
    with torch.no_grad():
        # Explicit all-ones mask: generate() would otherwise infer it from pad_token_id (0) and mask
        # out every id 0 of the prompt (qwen2_moe_tiny's tokens.txt has one).
        gen = loaded.generate(ids[None], attention_mask=torch.ones_like(ids[None]),
                              max_new_tokens=mf.N_GREEDY, do_sample=False, num_beams=1,
                              eos_token_id=None, pad_token_id=0)[0, mf.N_TOKENS:]
    greedy, margin = mf.greedy_no_cache(m64, ids, mf.N_GREEDY)
    assert gen.tolist() == greedy.tolist(), (name, gen.tolist(), greedy.tolist())
    mf.write_ids(out / "greedy.txt", [gen.tolist()])
    meta.update({"greedy_file": "greedy.txt", "greedy_new_tokens": mf.N_GREEDY,
                 "greedy_min_top1_top2_margin": margin,
                 "n_params": sum(p.numel() for p in loaded.parameters())})
    print(f"{name}: logits |max| {meta['logits_abs_max']:.3f}, greedy {gen.tolist()}, "
          f"min margin {margin:.4f}, f32-vs-f64 {meta['torch_f32_vs_f64_max_abs_diff']:.2e}")

    if moe:
        E, k, renorm = router_info(loaded)
        layers = moe_layers(loaded)
        meta["moe_block_check_max_abs_diff"] = check_moe_block(m64, disk, ids[None], mixtral)
        full = torch.cat([ids, gen])[None]
        st = routing_stats(router_logits_of(m64, full), k, E, layers)
        st_tok = routing_stats(router_logits_of(m64, ids[None]), k, E, layers)
        st32 = routing_stats(router_logits_of(loaded, full), k, E, layers)
        assert all(torch.equal(a, b) for a, b in zip(st["selected"], st32["selected"])), name
        for li in map(str, layers):
            assert min(st["expert_counts"][li]) > 0, (name, li, st["expert_counts"])
            assert st["distinct_topk_sets"][li] >= 4, (name, li, st["distinct_topk_sets"])
        assert st["min_gap_kth_vs_next"] >= MIN_ROUTER_GAP, (name, st["min_gap_kth_vs_next"])
        shared = isinstance(loaded, Qwen2MoeForCausalLM)
        meta["router"] = {
            "num_experts": E, "top_k": k, "moe_layers": layers,
            "dense_layers": [i for i in range(cfg.num_hidden_layers) if i not in layers],
            "order": "router logits x @ gate.weight^T (no bias) -> softmax over all E experts -> top-k of "
                     "the probabilities (ties: torch.topk; none here, see min gap)",
            "renormalize_topk": renorm,
            "weights": ("top-k probabilities divided by their sum" if renorm else
                        "top-k softmax probabilities as they are (sum < 1)"),
            "expert": "down(silu(gate(x)) * up(x)), times the routing weight, summed over the k experts",
            "shared_expert": ("sigmoid(x @ shared_expert_gate.weight^T) * shared_expert(x) added to the "
                              "routed sum (shared_expert: SwiGLU MLP, ffn "
                              f"{cfg.shared_expert_intermediate_size})") if shared else None,
            "transformers_softmax_dtype": "float32 (these float64 references keep float64; effect on "
                                          "logits: router_softmax_float32_effect_on_f64_logits)",
            "expert_load_positions": "tokens.txt + greedy.txt (32 positions), float64 model",
            "expert_load": st["expert_counts"],
            "expert_load_tokens_only": st_tok["expert_counts"],
            "distinct_topk_sets": st["distinct_topk_sets"],
            "min_gap_kth_vs_next_prob": st["min_gap_kth_vs_next"],
            "routing_f32_equals_f64": True,
        }
        print(f"{name}: router E={E} k={k} renorm={renorm} layers {layers}; min gap k-th vs next "
              f"{st['min_gap_kth_vs_next']:.3e}; expert load (32 positions) {st['expert_counts']}; "
              f"distinct top-k sets {st['distinct_topk_sets']}; "
              f"block check {meta['moe_block_check_max_abs_diff']:.1e}")
    meta["tensors"] = mf.safetensors_shapes(out / "model.safetensors")
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")

    if train:
        tm = moe_training_fixture(loaded, seed, vocab, out, mixtral)
        print(f"{name}: train losses {tm['losses']} -> {tm['loss_after_steps']:.5f}, "
              f"f32-vs-f64 grads {tm['torch_f32_vs_f64']['max_norm_rel_diff_grads']:.2e}, "
              f"params {tm['torch_f32_vs_f64']['max_norm_rel_diff_params']:.2e}; "
              f"router min gap over the steps {tm['router_min_gap_kth_vs_next_over_steps']:.3e}")
        if moe:
            am = aux_fixture(loaded, seed, vocab, out, mixtral)
            print(f"{name}: aux {am['aux_loss']:.8f} (transformers {am['aux_loss_transformers']:.8f}), "
                  f"ce {am['ce_loss']:.6f}, total {am['total_loss']:.6f}, f32-vs-f64 grads "
                  f"{am['torch_f32_vs_f64']['max_norm_rel_diff_grads_with_aux']:.2e}; "
                  f"train-batch expert counts {am['expert_counts']}")
    return loaded, ids


def train_batch(seed, vocab):
    g = torch.Generator().manual_seed(seed + 77)   # as make_fixtures.training_fixture
    data = torch.randint(0, vocab, (mf.TRAIN_B, mf.TRAIN_T + 1), generator=g)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def rel(a, b):
    """Largest per-tensor norm-relative difference (per hub tensor, as the files hold them)."""
    return max(float((a[n].double() - b[n].double()).norm() / max(b[n].double().norm(), 1e-30)) for n in b)


def moe_training_fixture(model32, seed, vocab, out_dir, mixtral):
    """make_fixtures.training_fixture with hub-named outputs, and routing tracked at every step
    (float32 and float64 runs must pick the same experts; the k-th vs (k+1)-th gap is recorded)."""
    inputs, targets = train_batch(seed, vocab)
    mf.write_ids(out_dir / "train_inputs.txt", inputs.tolist())
    mf.write_ids(out_dir / "train_targets.txt", targets.tolist())
    moe = is_moe(model32)

    def run(model):
        model.train()
        opt = torch.optim.AdamW(model.parameters(), **mf.ADAMW)
        losses, grads, selections, gaps = [], None, [], []

        def fwd():
            o = model(inputs, output_router_logits=True) if moe else model(inputs)
            if moe:
                E, k, _ = router_info(model)
                st = routing_stats(o.router_logits, k, E, moe_layers(model))
                selections.append(st["selected"])
                gaps.append(st["min_gap_kth_vs_next"])
            return F.cross_entropy(o.logits.reshape(-1, o.logits.shape[-1]), targets.reshape(-1))

        for step in range(mf.ADAMW_STEPS):
            opt.zero_grad(set_to_none=True)
            loss = fwd()
            loss.backward()
            if step == 0:
                grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
            losses.append(loss.item())
            opt.step()
        with torch.no_grad():
            final_loss = float(fwd())
        params = {n: p.detach().clone() for n, p in model.named_parameters()}
        return losses, final_loss, grads, params, selections, gaps

    losses, final_loss, grads, params, sel64, gaps64 = run(copy.deepcopy(model32).double())
    losses32, _, grads32, params32, sel32, _ = run(copy.deepcopy(model32))
    for a, b in zip(sel64, sel32):      # same routing decisions at every step and after
        for x, y in zip(a, b):
            assert torch.equal(x, y), "float32 and float64 runs route differently"
    model_file = out_dir / "model.safetensors"
    save_hub(out_dir / "grads.safetensors", grads, mixtral, model_file)
    save_hub(out_dir / "params_after_3_steps.safetensors", params, mixtral, model_file)
    min_gap = min(gaps64) if gaps64 else None
    if moe:
        assert min_gap >= MIN_ROUTER_GAP, min_gap
    hub_grads = to_hub(grads, mixtral)
    h32, h64 = to_hub(params32, mixtral), to_hub(params, mixtral)
    per_tensor = {n: float((h32[n].double() - h64[n]).norm() / max(h64[n].norm(), 1e-30)) for n in h64}
    loose = {n: r for n, r in sorted(per_tensor.items()) if r > 1e-4}
    meta = {
        "batch": mf.TRAIN_B, "seq": mf.TRAIN_T, "inputs_file": "train_inputs.txt",
        "targets_file": "train_targets.txt",
        "loss": "mean cross-entropy over all B*T positions, "
                "F.cross_entropy(logits.view(-1,V), targets.view(-1)); "
                "no router aux loss (see aux_loss.json for CE + coef * aux)",
        "optimizer": "torch.optim.AdamW, one param group (weight decay on every parameter), no clipping, "
                     "no LR schedule, same batch every step (on transformers' fused expert tensors; "
                     "elementwise, so the same per hub tensor)",
        "adamw": {"lr": mf.ADAMW["lr"], "beta1": mf.ADAMW["betas"][0], "beta2": mf.ADAMW["betas"][1],
                  "eps": mf.ADAMW["eps"], "weight_decay": mf.ADAMW["weight_decay"]},
        "steps": mf.ADAMW_STEPS,
        "losses": losses, "loss_after_steps": final_loss,
        "grads_file": "grads.safetensors (gradients at the initial parameters, step 1; hub names as "
                      "model.safetensors; experts never selected on the batch have zero gradient)",
        "params_file": "params_after_3_steps.safetensors (hub names as model.safetensors)",
        "parameters": {n: list(t.shape) for n, t in hub_grads.items()},
        "compute": "float64 (router softmax too), stored float32",
        "analytic_zero_grads": {},
        "router_min_gap_kth_vs_next_over_steps": min_gap,
        "router_min_gap_per_forward": gaps64,
        "routing_f32_equals_f64_every_step": True if moe else None,
        "torch_f32_vs_f64": {"losses_f32": losses32,
                             "max_norm_rel_diff_grads": rel(to_hub(grads32, mixtral), hub_grads),
                             "max_norm_rel_diff_params": rel(h32, h64),
                             "params_tensors_above_1e-4_norm_rel": loose,
                             "max_norm_rel_diff_params_other_tensors":
                                 max(r for n, r in per_tensor.items() if n not in loose),
                             "params_note": (
                                 "k_proj.bias (Qwen2-MoE): the components on the slow RoPE frequencies "
                                 "are hardly rotated at T=16, so they shift all scores of a row almost "
                                 "equally and their gradients are tiny (~1e-6 and below); Adam turns float32 "
                                 "rounding of those into updates of about +-lr, so a float32 engine lands up "
                                 "to ~1e-2 (norm-relative) away there. Compare those tensors loosely or skip "
                                 "them."
                                 if loose else "all tensors within 1e-4 norm-relative")},
    }
    (out_dir / "train.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def aux_fixture(model32, seed, vocab, out_dir, mixtral):
    """aux_loss.json and grads_with_aux.safetensors at the initial parameters on the training batch."""
    inputs, targets = train_batch(seed, vocab)   # = train_inputs.txt / train_targets.txt
    E, k, _ = router_info(model32)
    layers = moe_layers(model32)

    def total(model):
        model.train()
        model.zero_grad(set_to_none=True)
        o = model(inputs, output_router_logits=True)
        assert len(o.router_logits) == len(layers)
        ce = F.cross_entropy(o.logits.reshape(-1, o.logits.shape[-1]), targets.reshape(-1))
        aux = aux_loss_f64(o.router_logits, E, k)
        tot = ce + AUX_COEF * aux
        tot.backward()
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        return ce.item(), aux.item(), tot.item(), o, grads

    m64 = copy.deepcopy(model32).double()
    ce, aux, tot, o64, grads = total(m64)
    _, aux32, tot32, _, grads32 = total(copy.deepcopy(model32))
    aux_tf = float(o64.aux_loss.detach())           # transformers' own value (float32 sums inside)
    assert abs(aux_tf - aux) < 1e-6 * max(1.0, aux), (aux_tf, aux)
    # transformers' own total with labels (shift_labels = our targets), coef 0.02:
    m_chk = copy.deepcopy(model32).double()
    m_chk.router_aux_loss_coef = AUX_COEF
    with torch.no_grad():
        o_chk = m_chk(inputs, labels=targets, shift_labels=targets, output_router_logits=True)
    assert abs(float(o_chk.loss) - tot) < 1e-5, (float(o_chk.loss), tot)
    st = routing_stats(o64.router_logits, k, E, layers)
    probs = [torch.softmax(lg.detach(), -1) for lg in o64.router_logits]
    rows = sum(p.shape[0] for p in probs)
    save_hub(out_dir / "grads_with_aux.safetensors", grads, mixtral, out_dir / "model.safetensors")
    g_plain = read_safetensors(out_dir / "grads.safetensors")
    g_aux = to_hub(grads, mixtral)
    untouched = sorted(n for n in g_aux if torch.equal(g_aux[n].float(), g_plain[n]))
    meta = {
        "batch_files": ["train_inputs.txt", "train_targets.txt"],
        "parameters": "initial (model.safetensors)",
        "compute": "float64 (router softmax and aux sums too), stored float32",
        "router_aux_loss_coef": AUX_COEF,
        "router_aux_loss_coef_note": "0.02 used here for every model; config.json keeps the hub value "
                                     f"({model32.config.router_aux_loss_coef})",
        "ce_loss": ce, "aux_loss": aux, "total_loss": tot,
        "total_loss_definition": "ce_loss + router_aux_loss_coef * aux_loss (ce as in train.json)",
        "aux_loss_transformers": aux_tf,
        "aux_loss_transformers_note": "output.aux_loss of the float64 model: transformers sums in float32",
        "total_loss_transformers_labels": float(o_chk.loss),
        "grads_file": "grads_with_aux.safetensors (gradient of total_loss; hub names as model.safetensors)",
        "tensors_equal_to_grads_safetensors": untouched,
        "num_experts": E, "top_k": k, "moe_layers": layers, "n_tokens_per_layer": inputs.numel(),
        "rows_pooled": rows,
        "expert_counts": st["expert_counts"],
        "expert_counts_note": "per MoE layer, number of top-k selections of each expert on the training "
                              "batch (sums to B*T*k per layer)",
        "tokens_per_expert_f": [sum(st["expert_counts"][str(li)][e] for li in layers) / rows
                                for e in range(E)],
        "router_prob_per_expert_P": (sum(p.sum(0) for p in probs) / rows).tolist(),
        "router_min_gap_kth_vs_next": st["min_gap_kth_vs_next"],
        "formula": (
            "transformers' load_balancing_loss_func(router_logits, num_experts=E, top_k=k, "
            "attention_mask=None): router_logits is the tuple of the L MoE layers' gate logits, each [N, E] "
            "with N = B*T (dense layers contribute nothing). The layers are pooled (equivalent to "
            "concatenating all L*N rows): for every row p = softmax(logits) over all E experts and the top-k "
            "experts of p are selected (same selection as the forward pass, before any renormalisation). "
            "f_e = (number of times expert e is among a row's top-k, summed over all rows of all layers) / "
            "(L*N) -- not divided by k, so sum_e f_e = k; P_e = (sum over all L*N rows of p_e) / (L*N). "
            "aux = E * sum_e f_e * P_e (a single product of the pooled statistics, not a per-layer "
            "average of per-layer products). f is a count (no gradient); the gradient flows through P only. "
            "Perfectly balanced routing gives aux = k. The model adds router_aux_loss_coef * aux to its loss "
            "when labels are given."),
        "source": aux_formula_source(),
        "torch_f32_vs_f64": {"aux_loss_f32": aux32, "total_loss_f32": tot32,
                             "max_norm_rel_diff_grads_with_aux": rel(to_hub(grads32, mixtral), g_aux)},
    }
    (out_dir / "aux_loss.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/models"))
    ap.add_argument("--only", nargs="*", default=None, help="subset of " + ", ".join(SPECS))
    args = ap.parse_args()
    torch.set_num_threads(1)
    out_root = Path(args.out)
    out_root.mkdir(parents=True, exist_ok=True)
    for name in args.only or SPECS:
        make_moe_one(name, out_root)
        size = sum(p.stat().st_size for p in (out_root / name).rglob("*") if p.is_file())
        print(f"{name}: {size} bytes")


if __name__ == "__main__":
    main()
