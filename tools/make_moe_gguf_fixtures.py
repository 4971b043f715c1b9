#!/usr/bin/env python3
"""Writes GGUF versions of the tiny HF MoE fixtures, as llama.cpp's converter
(convert_hf_to_gguf.py) writes them, with transformers references of exactly the weights each file
holds:

    tests/fixtures/models/mixtral_tiny_gguf/     (from mixtral_tiny,   general.architecture "llama")
    tests/fixtures/models/qwen3_moe_tiny_gguf/   (from qwen3_moe_tiny, general.architecture "qwen3moe")
    tests/fixtures/models/qwen2_moe_tiny_gguf/   (from an all-sparse variant of qwen2_moe_tiny,
                                                  general.architecture "qwen2moe"; see below)

Each directory: model-f32.gguf (every tensor F32, general.file_type 0 = ALL_F32), model-q8_0.gguf
(general.file_type 7 = MOSTLY_Q8_0), tokens.txt (copied from the HF fixture), logits-<v>.bin
([24, 256] f32), greedy-<v>.txt (8 ids), meta.json. For mixtral / qwen3-moe the source is the HF
fixture's model.safetensors + config.json as they are (tools/make_moe_fixtures.py); nothing is
re-drawn.

qwen2moe and dense layers: qwen2_moe_tiny has mlp_only_layers [1] (layer 1 a dense SwiGLU MLP).
llama.cpp's qwen2moe cannot represent that: gguf's MODEL_TENSORS[QWEN2MOE] has no FFN_GATE / FFN_UP /
FFN_DOWN, so Qwen2MoeModel (which reads neither mlp_only_layers nor decoder_sparse_step) fails with
"Can not map tensor 'model.layers.1.mlp.down_proj.weight'", and src/models/qwen2moe.cpp creates
ffn_gate_inp, ffn_{gate,up,down}_exps, ffn_gate_inp_shexp and ffn_{gate,up,down}_shexp as required
for every layer and runs build_moe_ffn + the shared expert in every layer (no faithful encoding of a
dense MLP exists: the shared-expert gate is a sigmoid, never exactly 1, and n_ff_shexp is global).
So qwen2_moe_tiny_gguf is converted from build_all_sparse_qwen2_moe's model: make_moe_fixtures'
qwen2_moe_tiny recipe (config, seed 1030, moe_init_weights) with mlp_only_layers = [], saved like an
HF fixture to a temporary directory "qwen2_moe_tiny_all_sparse" (-> general.name) and not kept; its
float64 transformers references (logits, greedy, generate() cross-check, routing checks) are made
there, and tokens.txt is qwen2_moe_tiny's (same draw, asserted).

Conventions, from ggml-org/llama.cpp (convert_hf_to_gguf.py, src/models/{llama,qwen3moe}.cpp,
src/llama-model.cpp, src/llama-graph.cpp) and the gguf package (gguf/constants.py,
gguf/tensor_mapping.py, gguf/gguf_writer.py):
- Mixtral: class LlamaModel (registered for "MixtralForCausalLM"), MODEL_ARCH.LLAMA -> "llama".
  LlamaModel.modify_tensors permutes q_proj rows with LlamaModel.permute(w, n_head, n_head) and
  k_proj rows with permute(w, n_head, n_kv_head) (per head: GGUF row 2i+j <- HF row j*D/2+i,
  make_fixtures.to_gguf_rope_order), because llama.cpp's llama arch uses LLAMA_ROPE_TYPE_NORM
  (adjacent pairs; llama_model_rope_type in src/llama-model.cpp). The per-expert
  block_sparse_moe.experts.{e}.{w1,w2,w3} of a layer are torch.stack'ed (dim 0, expert order) into
  "layers.{bid}.feed_forward.experts.{w1,w2,w3}.weight" -> blk.N.ffn_gate_exps / ffn_down_exps /
  ffn_up_exps (emitted in that order, once the layer's last expert tensor is seen);
  block_sparse_moe.gate -> blk.N.ffn_gate_inp.
- Qwen3-MoE: class Qwen3MoeModel(Qwen2MoeModel), MODEL_ARCH.QWEN3MOE -> "qwen3moe", no Q/K
  permutation (LLAMA_ROPE_TYPE_NEOX). Experts stacked in the order down_proj, gate_proj, up_proj
  from "model.layers.{bid}.mlp.experts.{w}.weight"; mlp.gate -> ffn_gate_inp;
  self_attn.{q,k}_norm -> attn_{q,k}_norm.
- Qwen2-MoE: class Qwen2MoeModel, MODEL_ARCH.QWEN2MOE -> "qwen2moe" (conversion/qwen.py in current
  llama.cpp), no Q/K permutation (NEOX); experts as Qwen3-MoE; self_attn.{q,k,v}_proj.bias ->
  blk.N.attn_{q,k,v}.bias; mlp.shared_expert.{gate,up,down}_proj -> ffn_{gate,up,down}_shexp
  (ne [C, Fs], [C, Fs], [Fs, C]); mlp.shared_expert_gate.weight (HF (1, C)) -> ffn_gate_inp_shexp,
  written 2-D as ne [C, 1] (prepare_tensors no longer squeezes; older converters did, giving [C];
  llama.cpp creates it as {n_embd} and its shape check accepts trailing 1s). Tied embeddings: the
  checkpoint has no lm_head.weight, so there is no output.weight (llama.cpp's qwen2moe loader would
  in fact require one; the engine here takes token_embd). Graph (src/models/qwen2moe.cpp):
  build_moe_ffn(..., LLM_FFN_SILU, norm_w = false, ..., SOFTMAX) -- the top-k softmax probabilities
  are used as they are, matching norm_topk_prob false -- plus ffn_down_shexp(silu(ffn_gate_shexp x) *
  ffn_up_shexp x) * sigmoid(ffn_gate_inp_shexp . x) (computed as silu(g)/g).
- numpy (E, F, C) is GGUF ne [C, F, E] (GGUFWriter stores reversed dims): ffn_gate_exps /
  ffn_up_exps ne [n_embd, n_ff_exp, n_expert], ffn_down_exps ne [n_ff_exp, n_embd, n_expert],
  ffn_gate_inp ne [n_embd, n_expert] (as llama.cpp's create_tensor calls expect).
- Metadata (TextModel.set_gguf_parameters, then LlamaModel / Qwen2MoeModel additions):
  block_count, context_length, embedding_length, feed_forward_length (intermediate_size),
  attention.head_count, attention.head_count_kv, rope.freq_base, attention.layer_norm_rms_epsilon,
  expert_count (num_local_experts / num_experts), expert_used_count (num_experts_per_tok),
  attention.key_length / value_length (only when the config has head_dim: Qwen3-MoE yes, Mixtral no),
  general.file_type; llama adds vocab_size and rope.dimension_count; qwen2moe/qwen3moe add
  expert_feed_forward_length (moe_intermediate_size), and expert_shared_feed_forward_length
  (shared_expert_intermediate_size) when the config has it (qwen2moe). rope_type "default" writes no
  scaling keys. No expert_weights_norm key: llama.cpp's qwen3moe and llama graphs call build_moe_ffn
  with norm_w = true hard-coded (softmax over all experts -> top-k -> divided by their sum), matching
  norm_topk_prob true / Mixtral; qwen2moe's with norm_w = false. general.type "model",
  general.name and general.size_label as gguf.Metadata and gguf.size_label give them for the HF
  directory; general.quantization_version 2.
- Tensor types (ModelBase.prepare_tensors): 1-D tensors (biases included) and names ending
  "_norm.weight" F32; ffn_gate_inp and ffn_gate_inp_shexp always F32; everything else the --outtype
  (f32: F32; q8_0: Q8_0, token_embd and output included). Q8_0 blocks are 32 along ne[0] (the input
  dim). A tensor whose ne[0] is not a multiple of 32 (here ffn_down_exps: ne[0] = expert ffn 48 / 24
  for mixtral / qwen3moe; ffn_down_shexp: ne[0] = 48 for qwen2moe) cannot be Q8_0; the converter
  then falls back to F16 (QuantError), this script keeps it F32 instead (FALLBACK below).
- Tensor order: the converter reads the safetensors names sorted (gguf.utility.SafetensorsLocal);
  the fixtures' headers are already sorted (asserted).
- Tokenizer: not the converter's (the HF fixtures have none): the byte-level stand-in of
  make_fixtures' GGUF: tokenizer.ggml.model "gpt2", pre "default", 256 tokens (GPT-2 byte-to-unicode
  spelling), all NORMAL; no merges, no special tokens.

References: transformers, model in float64 (eager attention and experts, routers patched to keep
float64 as in make_moe_fixtures), on the weights the file holds: read back from the file with
gguf.GGUFReader (dequantized, experts unstacked, Q/K permutation undone) and asserted equal to the
weights the writer encoded; stored f32. The f32 variant is asserted to reproduce the HF fixture's
logits.bin / greedy.txt (qwen2moe: the all-sparse variant's own float64 references). An independent
float64 numpy forward of the file as stored (llama.cpp's graph: RoPE NORM for llama / NEOX for
qwen3moe and qwen2moe on the GGUF rows, build_moe_ffn routing, qwen2moe's biases and shared expert)
must match the references to 2e-5; it lands ~2e-6 (qwen2moe ~1e-5) away because transformers
computes RMSNorm, the attention softmax and the RoPE tables in float32 even in a float64 model (a
wrong convention would be O(1)).

Run: PY=$(tools/venv.sh) && "$PY" tools/make_moe_gguf_fixtures.py [--out tests/fixtures/models]
Deterministic (same inputs, same bytes). Layouts: tests/fixtures/README.md.
"""
import argparse
import copy
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
import gguf
from safetensors import safe_open
from transformers import MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf        # noqa: E402
import make_moe_fixtures as mmf   # noqa: E402

Q = gguf.GGMLQuantizationType
FALLBACK = Q.F32   # for a tensor Q8_0 cannot hold (the converter would write F16)

# name -> (HF fixture, model class, GGUF arch, Q/K permuted, expert merge order as the converter)
SPECS = {
    "mixtral_tiny": ("mixtral_tiny", MixtralForCausalLM, gguf.MODEL_ARCH.LLAMA, True, ("w1", "w2", "w3")),
    "qwen3_moe_tiny": ("qwen3_moe_tiny", Qwen3MoeForCausalLM, gguf.MODEL_ARCH.QWEN3MOE, False,
                       ("down_proj", "gate_proj", "up_proj")),
    # Source: not qwen2_moe_tiny itself (its dense layer 1 has no qwen2moe form) but its all-sparse
    # variant, built in memory by build_all_sparse_qwen2_moe (see the docstring).
    "qwen2_moe_tiny": ("qwen2_moe_tiny", Qwen2MoeForCausalLM, gguf.MODEL_ARCH.QWEN2MOE, False,
                       ("down_proj", "gate_proj", "up_proj")),
}
ALL_SPARSE_DIR = "qwen2_moe_tiny_all_sparse"   # the variant's HF directory name (-> general.name)
VARIANTS = {"f32": gguf.LlamaFileType.ALL_F32, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}


# ---------------------------------------------------------------------------------------------
# HF side.

def read_header_order(path):
    """Tensor names in the safetensors header's order (the order the converter iterates)."""
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return [k for k in json.loads(raw[8:8 + n]) if k != "__metadata__"]


def read_hub(path):
    with safe_open(str(path), "np") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def expert_key(mixtral, bid, e, w):
    return (f"model.layers.{bid}.block_sparse_moe.experts.{e}.{w}.weight" if mixtral
            else f"model.layers.{bid}.mlp.experts.{e}.{w}.weight")


def from_hub(hub, mixtral, n_layers, E):
    """Hub names (one tensor per expert) -> transformers 5 in-memory names (fused experts); the
    inverse of make_moe_fixtures.to_hub (asserted by the caller)."""
    g, u, d = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
    out, used = {}, set()
    for b in range(n_layers):
        ks = {w: [expert_key(mixtral, b, e, w) for e in range(E)] for w in (g, u, d)}
        used.update(k for v in ks.values() for k in v)
        st = {w: torch.stack([torch.as_tensor(hub[k]) for k in v]) for w, v in ks.items()}
        out[f"model.layers.{b}.mlp.experts.gate_up_proj"] = torch.cat([st[g], st[u]], dim=1)
        out[f"model.layers.{b}.mlp.experts.down_proj"] = st[d]
        router = (f"model.layers.{b}.block_sparse_moe.gate.weight" if mixtral
                  else f"model.layers.{b}.mlp.gate.weight")
        out[f"model.layers.{b}.mlp.gate.weight"] = torch.as_tensor(hub[router])
        used.add(router)
    for k, v in hub.items():
        if k not in used:
            out[k] = torch.as_tensor(v)
    return out


def with_tied_head(mem, cfg):
    """The model's state_dict() names: a tied model also lists lm_head.weight (= embed_tokens)."""
    if not cfg.tie_word_embeddings:
        return mem
    return dict(mem, **{"lm_head.weight": mem["model.embed_tokens.weight"]})


def build_all_sparse_qwen2_moe(src_dir, tmp_root):
    """qwen2_moe_tiny as make_moe_fixtures draws it (same config, seed 1030, same init), but with
    mlp_only_layers = [] so that every layer is sparse (llama.cpp's qwen2moe has no dense layer).
    Saved as make_moe_fixtures saves a fixture (save_pretrained + hub-style config.json) to
    tmp_root/ALL_SPARSE_DIR, which is then converted like the other HF fixtures. Returns (HF dir,
    token ids, float64 reference logits [T, V], greedy ids, info for meta.json). The references are
    make_moe_fixtures' (transformers float64, router softmax in float64, generate() cross-check)."""
    seed, model_cls, cfg_cls, kwargs, _, _ = mmf.SPECS["qwen2_moe_tiny"]
    assert kwargs["mlp_only_layers"] == [1], kwargs
    cfg = mf.make_config(cfg_cls, dict(kwargs, mlp_only_layers=[]))
    torch.manual_seed(seed)
    model = model_cls(cfg).to(torch.float32).eval()
    mmf.moe_init_weights(model, seed)
    assert mmf.moe_layers(model) == list(range(cfg.num_hidden_layers))
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    hf_dir = tmp_root / ALL_SPARSE_DIR
    model.save_pretrained(hf_dir, safe_serialization=True)
    (hf_dir / "generation_config.json").unlink(missing_ok=True)
    hub_cfg = mmf.write_hub_config(hf_dir / "config.json", model_cls)
    loaded = model_cls.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager",
                                       experts_implementation="eager").eval()
    assert loaded.config.mlp_only_layers == [] and loaded.config.tie_word_embeddings
    g = torch.Generator().manual_seed(seed + 1)           # make_moe_fixtures' token draw
    ids = torch.randint(0, cfg.vocab_size, (mf.N_TOKENS,), generator=g)
    assert ids.tolist() == [int(t) for t in (src_dir / "tokens.txt").read_text().split()]
    with torch.no_grad():
        assert torch.equal(model(ids[None]).logits, loaded(ids[None]).logits)
    disk, orig = read_hub(hf_dir / "model.safetensors"), read_hub(src_dir / "model.safetensors")
    same = sorted(k for k in disk if k in orig and np.array_equal(disk[k], orig[k]))

    mmf.set_router_patch(True)
    m64 = copy.deepcopy(loaded).double()
    with torch.no_grad():
        logits = m64(ids[None]).logits[0]
        gen = loaded.generate(ids[None], attention_mask=torch.ones_like(ids[None]),
                              max_new_tokens=mf.N_GREEDY, do_sample=False, num_beams=1,
                              eos_token_id=None, pad_token_id=0)[0, mf.N_TOKENS:]
    greedy, margin = mf.greedy_no_cache(m64, ids, mf.N_GREEDY)
    assert gen.tolist() == greedy.tolist(), (gen.tolist(), greedy.tolist())
    E, k, renorm = mmf.router_info(loaded)
    layers = mmf.moe_layers(loaded)
    full = torch.cat([ids, greedy])[None]
    st = mmf.routing_stats(mmf.router_logits_of(m64, full), k, E, layers)
    st32 = mmf.routing_stats(mmf.router_logits_of(loaded, full), k, E, layers)
    assert all(torch.equal(a, b) for a, b in zip(st["selected"], st32["selected"]))
    for li in map(str, layers):
        assert min(st["expert_counts"][li]) > 0, (li, st["expert_counts"])
        assert st["distinct_topk_sets"][li] >= 4, (li, st["distinct_topk_sets"])
    assert st["min_gap_kth_vs_next"] >= mmf.MIN_ROUTER_GAP, st["min_gap_kth_vs_next"]
    block = mmf.check_moe_block(m64, {n: torch.from_numpy(a) for n, a in disk.items()}, ids[None], False)
    mmf.set_router_patch(False)
    assert not renorm
    info = {
        "name": ALL_SPARSE_DIR,
        "why": "qwen2_moe_tiny has a dense layer (mlp_only_layers [1]); llama.cpp's qwen2moe cannot "
               "hold one (its converter has no name for model.layers.N.mlp.{gate,up,down}_proj and its "
               "loader and graph make every layer a routed MoE + shared expert), so this fixture is "
               "converted from an all-sparse variant instead",
        "built_as": "tools/make_moe_fixtures.py SPECS['qwen2_moe_tiny'] with mlp_only_layers = [] "
                    "(every layer sparse, decoder_sparse_step 1), same seed (1030), same init "
                    "(make_moe_fixtures.moe_init_weights), saved like a fixture (save_pretrained + "
                    "write_hub_config) to a temporary directory named " + ALL_SPARSE_DIR +
                    " (not kept; general.name comes from that name) and converted from there",
        "config": {k_: hub_cfg[k_] for k_ in sorted(hub_cfg)
                   if k_ not in ("architectures", "transformers_version")},
        "tensors_equal_to_qwen2_moe_tiny": same,
        "tensors_equal_to_qwen2_moe_tiny_note": "init_weights draws the parameters in order from one "
                                                "generator (the 3-D expert tensors from a second one), so "
                                                "what is drawn before layer 1's mlp is identical; every "
                                                "other tensor differs from qwen2_moe_tiny's",
        "tokens": "tokens.txt = qwen2_moe_tiny/tokens.txt (the same seed + 1 draw)",
        "hf_float64_logits_abs_max": float(logits.abs().max()),
        "hf_greedy": greedy.tolist(),
        "hf_greedy_min_top1_top2_margin": margin,
        "hf_generate_equals_greedy": True,
        "moe_block_check_max_abs_diff": block,
        "router": {"num_experts": E, "top_k": k, "moe_layers": layers, "renormalize_topk": False,
                   "expert_load": st["expert_counts"], "distinct_topk_sets": st["distinct_topk_sets"],
                   "min_gap_kth_vs_next_prob": st["min_gap_kth_vs_next"], "routing_f32_equals_f64": True,
                   "positions": "tokens.txt + hf_greedy (32 positions), float64 model"},
        "n_params": sum(p.numel() for p in loaded.parameters()),
    }
    return hf_dir, ids, logits, greedy.tolist(), info


# ---------------------------------------------------------------------------------------------
# Conversion (convert_hf_to_gguf.py's steps for these classes).

def qtype_for(gname, arr, ftype):
    """ModelBase.prepare_tensors' choice; returns (type, note)."""
    if arr.ndim <= 1 or gname.endswith("_norm.weight"):
        return Q.F32, None
    if ".ffn_gate_inp." in gname or ".ffn_gate_inp_shexp." in gname:   # FFN_GATE_INP(_SHEXP)
        return Q.F32, None
    if ftype == gguf.LlamaFileType.ALL_F32:
        return Q.F32, None
    assert ftype == gguf.LlamaFileType.MOSTLY_Q8_0
    bs = gguf.GGML_QUANT_SIZES[Q.Q8_0][0]
    if arr.shape[-1] % bs:
        return FALLBACK, (f"ne[0] = {arr.shape[-1]} not a multiple of {bs}: kept {FALLBACK.name} "
                          f"(convert_hf_to_gguf.py falls back to F16)")
    return Q.Q8_0, None


def converted_tensors(hub, order, cfg, arch, permute, merge_order, mixtral):
    """Yields (hf names, gguf name, float32 array as written, how to undo) in the converter's order."""
    tmap = gguf.get_tensor_name_map(arch, cfg.num_hidden_layers)
    E = cfg.num_local_experts if mixtral else cfg.num_experts
    pending = {}
    for name in order:
        t = hub[name].astype(np.float32)
        undo = None
        if permute and name.endswith("q_proj.weight"):
            t, undo = mf.to_gguf_rope_order(t, cfg.num_attention_heads), ("perm", cfg.num_attention_heads)
        elif permute and name.endswith("k_proj.weight"):
            t, undo = mf.to_gguf_rope_order(t, cfg.num_key_value_heads), ("perm", cfg.num_key_value_heads)
        if ".experts." in name:
            bid = int(name.split(".")[2])
            pending.setdefault(bid, {})[name] = t
            if len(pending[bid]) < 3 * E:
                continue
            for w in merge_order:
                names = [expert_key(mixtral, bid, e, w) for e in range(E)]
                stacked = np.stack([pending[bid].pop(k) for k in names], axis=0)
                merged = (f"layers.{bid}.feed_forward.experts.{w}.weight" if mixtral
                          else f"model.layers.{bid}.mlp.experts.{w}.weight")
                gname = tmap.get_name(merged, try_suffixes=(".weight", ".bias"))
                assert gname is not None, merged
                yield names, gname, np.ascontiguousarray(stacked), ("unstack", None)
            assert not pending[bid]
            continue
        gname = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
        assert gname is not None, name
        yield [name], gname, np.ascontiguousarray(t), undo
    assert not any(pending.values())


def add_metadata_params(w, cfg, hf_head_dim, arch, ftype, mixtral):
    """TextModel.set_gguf_parameters (+ LlamaModel / Qwen2MoeModel), keys in the converter's order.
    hf_head_dim: config.json's head_dim or None (the converter reads hparams["head_dim"])."""
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    assert cfg.rope_parameters["rope_type"] == "default"   # writes no rope.scaling.* keys
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_expert_count(cfg.num_local_experts if mixtral else cfg.num_experts)
    w.add_expert_used_count(cfg.num_experts_per_tok)
    if hf_head_dim is not None:            # absent for Mixtral
        w.add_key_length(hf_head_dim)
        w.add_value_length(hf_head_dim)
    w.add_file_type(ftype)
    if arch == gguf.MODEL_ARCH.LLAMA:
        w.add_vocab_size(cfg.vocab_size)
        w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    else:
        w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
        if getattr(cfg, "shared_expert_intermediate_size", None) is not None:   # Qwen2MoeModel
            w.add_expert_shared_feed_forward_length(cfg.shared_expert_intermediate_size)


def write_gguf(path, hf_dir, hub, order, cfg, spec, variant):
    """Writes the file; returns ({hf name: float64 array the file holds, HF layout}, notes)."""
    _, _, arch, permute, merge_order = spec
    mixtral = arch == gguf.MODEL_ARCH.LLAMA
    ftype = VARIANTS[variant]
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    held, notes = {}, {}
    for names, gname, t, undo in converted_tensors(hub, order, cfg, arch, permute, merge_order, mixtral):
        qtype, note = qtype_for(gname, t, ftype)
        if note:
            notes[gname] = note
        data, raw_dtype, back = mf.encode_tensor(t, qtype)
        w.add_tensor(gname, data, raw_dtype=raw_dtype)
        if undo is not None and undo[0] == "unstack":
            for e, n in enumerate(names):
                held[n] = back[e]
        elif undo is not None:
            held[names[0]] = mf.from_gguf_rope_order(back, undo[1])
        else:
            held[names[0]] = back
    # prepare_metadata: general.type, gguf.Metadata, set_gguf_parameters, quantization version,
    # then set_vocab (here the byte-level stand-in).
    total, shared, expert, n_exp = w.get_total_parameter_count()
    md = gguf.Metadata.load(None, hf_dir, None, total)
    if md.name is None:
        md.name = hf_dir.name
    if md.size_label is None and total > 0:
        md.size_label = gguf.size_label(total, shared, expert, n_exp)
    w.add_type(gguf.GGUFType.MODEL)
    md.set_gguf_meta_model(w)
    hf_head_dim = json.loads((hf_dir / "config.json").read_text()).get("head_dim")
    add_metadata_params(w, cfg, hf_head_dim, arch, ftype, mixtral)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(mf.byte_tokens())
    w.add_token_types([gguf.TokenType.NORMAL] * 256)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return held, notes


# ---------------------------------------------------------------------------------------------
# Reading back (independent of the writer's name mapping).

def field_value(f):
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode() for i in f.data]
        return [f.parts[i][0].item() for i in f.data]
    v = f.parts[f.data[0]]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(v).decode()
    return v[0].item()


def read_gguf(path):
    """(metadata {key: value}, [(name, ne, type name, float64 array in numpy order = reversed ne)])."""
    r = gguf.GGUFReader(str(path))
    meta = {k: field_value(f) for k, f in r.fields.items() if not k.startswith("GGUF.")}
    tensors = []
    for t in r.tensors:
        ne = [int(x) for x in t.shape]
        a = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float64)
        tensors.append((t.name, ne, t.tensor_type.name, a.reshape(list(reversed(ne)))))
    return meta, tensors


def hub_from_gguf(tensors, cfg, arch):
    """Rebuilds the HF hub state dict from the GGUF tensors (own name table, un-permute, unstack)."""
    mixtral = arch == gguf.MODEL_ARCH.LLAMA
    E = cfg.num_local_experts if mixtral else cfg.num_experts
    top = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
    per = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
           "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
           "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
           "ffn_norm": "post_attention_layernorm",
           "ffn_gate_inp": "block_sparse_moe.gate" if mixtral else "mlp.gate",
           "ffn_gate_inp_shexp": "mlp.shared_expert_gate", "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
           "ffn_up_shexp": "mlp.shared_expert.up_proj", "ffn_down_shexp": "mlp.shared_expert.down_proj"}
    exps = {"ffn_gate_exps": "w1" if mixtral else "gate_proj", "ffn_up_exps": "w3" if mixtral else "up_proj",
            "ffn_down_exps": "w2" if mixtral else "down_proj"}
    out = {}
    for name, _, _, a in tensors:
        if name in top:
            out[top[name]] = a
            continue
        blk, b, kind, suffix = name.split(".")
        assert blk == "blk" and (suffix == "weight" or (suffix == "bias" and kind in BIASED)), name
        b = int(b)
        if kind in exps:
            assert a.shape[0] == E, (name, a.shape)
            for e in range(E):
                out[expert_key(mixtral, b, e, exps[kind])] = a[e]
            continue
        if mixtral and kind == "attn_q":
            a = mf.from_gguf_rope_order(a, cfg.num_attention_heads)
        elif mixtral and kind == "attn_k":
            a = mf.from_gguf_rope_order(a, cfg.num_key_value_heads)
        out[f"model.layers.{b}.{per[kind]}.{suffix}"] = a
    return out


BIASED = ("attn_q", "attn_k", "attn_v")   # qwen2moe: q/k/v biases (blk.N.attn_{q,k,v}.bias)


# ---------------------------------------------------------------------------------------------
# Independent forward of the file as stored, llama.cpp's graph semantics (float64 numpy).

def rms(x, g, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def rope(x, theta, neox):
    """x (T, H, D). NORM (llama): pairs (2i, 2i+1); NEOX (qwen3moe): pairs (i, i + D/2);
    angle pos * theta^(-2i/D) (ggml_rope_ext, n_rot = D, no scaling)."""
    T, _, D = x.shape
    ang = np.arange(T, dtype=np.float64)[:, None] * theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    y = x.copy()
    if neox:
        a, b = x[..., :D // 2], x[..., D // 2:]
        y[..., :D // 2], y[..., D // 2:] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., 0::2], x[..., 1::2]
        y[..., 0::2], y[..., 1::2] = a * c - b * s, a * s + b * c
    return y


def gguf_forward(meta, tensors, ids):
    """Returns (logits [T, V], smallest k-th minus (k+1)-th router probability,
    [per layer: sorted top-k expert ids per position])."""
    arch = meta["general.architecture"]
    k = lambda s: meta[f"{arch}.{s}"]
    C, L = k("embedding_length"), k("block_count")
    H, KV = k("attention.head_count"), k("attention.head_count_kv")
    D = meta.get(f"{arch}.attention.key_length", C // H)
    eps, theta = k("attention.layer_norm_rms_epsilon"), k("rope.freq_base")
    E, K = k("expert_count"), k("expert_used_count")
    neox = {"llama": False, "qwen3moe": True, "qwen2moe": True}[arch]
    norm_w = arch != "qwen2moe"      # build_moe_ffn's norm_w: true for llama / qwen3moe, false for qwen2moe
    W = {n: a for n, _, _, a in tensors}
    T = len(ids)
    x = W["token_embd.weight"][ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    gap, routes = np.inf, []
    for b in range(L):
        p = lambda s: W[f"blk.{b}.{s}.weight"]
        h = rms(x, p("attn_norm"), eps)
        q, kk, v = h @ p("attn_q").T, h @ p("attn_k").T, h @ p("attn_v").T
        if f"blk.{b}.attn_q.bias" in W:                  # qwen2moe: q/k/v biases
            q, kk, v = (q + W[f"blk.{b}.attn_q.bias"], kk + W[f"blk.{b}.attn_k.bias"],
                        v + W[f"blk.{b}.attn_v.bias"])
        q, kk, v = q.reshape(T, H, D), kk.reshape(T, KV, D), v.reshape(T, KV, D)
        if f"blk.{b}.attn_q_norm.weight" in W:
            q, kk = rms(q, p("attn_q_norm"), eps), rms(kk, p("attn_k_norm"), eps)
        q, kk = rope(q, theta, neox), rope(kk, theta, neox)
        att = np.empty((T, H, D))
        for hh in range(H):
            g = hh // (H // KV)
            sc = q[:, hh] @ kk[:, g].T / np.sqrt(D) + mask
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            att[:, hh] = (sc / sc.sum(-1, keepdims=True)) @ v[:, g]
        x = x + att.reshape(T, H * D) @ p("attn_output").T
        h = rms(x, p("ffn_norm"), eps)
        lg = h @ p("ffn_gate_inp").T                     # (T, E)
        pr = np.exp(lg - lg.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)                  # softmax over all experts
        srt = np.sort(pr, -1)[:, ::-1]
        gap = min(gap, float((srt[:, K - 1] - srt[:, K]).min()))
        y = np.zeros_like(x)
        routes.append([])
        for t in range(T):
            sel = np.argsort(-pr[t], kind="stable")[:K]
            routes[-1].append(sorted(int(e) for e in sel))
            wts = pr[t, sel] / pr[t, sel].sum() if norm_w else pr[t, sel]
            for e, we in zip(sel, wts):
                gt = p("ffn_gate_exps")[e] @ h[t]
                up = p("ffn_up_exps")[e] @ h[t]
                y[t] += we * (p("ffn_down_exps")[e] @ (gt / (1 + np.exp(-gt)) * up))
        if f"blk.{b}.ffn_gate_inp_shexp.weight" in W:   # qwen2moe shared expert, sigmoid-gated
            gs = h @ p("ffn_gate_inp_shexp").reshape(-1)   # ne [C, 1] (or [C]) -> (T,)
            gt, up = h @ p("ffn_gate_shexp").T, h @ p("ffn_up_shexp").T
            y = y + (1 / (1 + np.exp(-gs)))[:, None] * ((gt / (1 + np.exp(-gt)) * up) @ p("ffn_down_shexp").T)
        x = x + y
    out = W.get("output.weight", W["token_embd.weight"])   # no output.weight: tied (token_embd)
    return rms(x, W["output_norm.weight"], eps) @ out.T, gap, routes


# ---------------------------------------------------------------------------------------------

def expected_ne(cfg, arch):
    mixtral, qwen2moe = arch == gguf.MODEL_ARCH.LLAMA, arch == gguf.MODEL_ARCH.QWEN2MOE
    C, V, H, KV = cfg.hidden_size, cfg.vocab_size, cfg.num_attention_heads, cfg.num_key_value_heads
    D = C // H if mixtral or qwen2moe else cfg.head_dim
    E = cfg.num_local_experts if mixtral else cfg.num_experts
    Fe = cfg.intermediate_size if mixtral else cfg.moe_intermediate_size
    ne = {"token_embd.weight": [C, V], "output_norm.weight": [C]}
    if not cfg.tie_word_embeddings:        # tied: no lm_head.weight in the checkpoint, no output.weight
        ne["output.weight"] = [C, V]
    for b in range(cfg.num_hidden_layers):
        ne.update({f"blk.{b}.attn_norm.weight": [C], f"blk.{b}.attn_q.weight": [C, H * D],
                   f"blk.{b}.attn_k.weight": [C, KV * D], f"blk.{b}.attn_v.weight": [C, KV * D],
                   f"blk.{b}.attn_output.weight": [H * D, C], f"blk.{b}.ffn_norm.weight": [C],
                   f"blk.{b}.ffn_gate_inp.weight": [C, E], f"blk.{b}.ffn_gate_exps.weight": [C, Fe, E],
                   f"blk.{b}.ffn_up_exps.weight": [C, Fe, E], f"blk.{b}.ffn_down_exps.weight": [Fe, C, E]})
        if qwen2moe:
            Fs = cfg.shared_expert_intermediate_size
            ne.update({f"blk.{b}.attn_q.bias": [H * D], f"blk.{b}.attn_k.bias": [KV * D],
                       f"blk.{b}.attn_v.bias": [KV * D],
                       # HF shared_expert_gate.weight is (1, C); the converter keeps it 2-D: ne [C, 1]
                       f"blk.{b}.ffn_gate_inp_shexp.weight": [C, 1],
                       f"blk.{b}.ffn_gate_shexp.weight": [C, Fs], f"blk.{b}.ffn_up_shexp.weight": [C, Fs],
                       f"blk.{b}.ffn_down_shexp.weight": [Fs, C]})
        elif not mixtral:
            ne.update({f"blk.{b}.attn_q_norm.weight": [D], f"blk.{b}.attn_k_norm.weight": [D]})
    return ne


def summarize_meta(meta):
    out = {}
    for k, v in meta.items():
        if isinstance(v, list) and len(v) > 8:
            out[k] = f"array[{len(v)}]" + (f" {v[:3]} ..." if not isinstance(v[0], str) else "")
        else:
            out[k] = v
    return out


def make_one(name, models_root, out_root):
    spec = SPECS[name]
    src, model_cls, arch, permute, _ = spec
    mixtral = arch == gguf.MODEL_ARCH.LLAMA
    qwen2moe = arch == gguf.MODEL_ARCH.QWEN2MOE
    out = out_root / f"{name}_gguf"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    tmp = None
    if qwen2moe:
        tmp = tempfile.TemporaryDirectory()
        hf_dir, ids, hf_logits, hf_greedy, variant_info = build_all_sparse_qwen2_moe(models_root / src,
                                                                                     Path(tmp.name))
    else:
        hf_dir = models_root / src

    model = model_cls.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager",
                                      experts_implementation="eager").eval()
    cfg = model.config
    E = cfg.num_local_experts if mixtral else cfg.num_experts
    hub = read_hub(hf_dir / "model.safetensors")
    order = read_header_order(hf_dir / "model.safetensors")
    assert order == sorted(order)   # the converter iterates by name (gguf.utility.SafetensorsLocal)
    # from_hub is the exact inverse of make_moe_fixtures.to_hub and gives the model's own tensors.
    mem = from_hub(hub, mixtral, cfg.num_hidden_layers, E)
    back = mmf.to_hub(mem, mixtral)
    assert sorted(back) == sorted(hub) and all(np.array_equal(back[k].numpy(), hub[k]) for k in hub)
    sd, full_mem = model.state_dict(), with_tied_head(mem, cfg)
    assert sorted(sd) == sorted(full_mem), sorted(set(sd) ^ set(full_mem))
    assert all(torch.equal(sd[k], full_mem[k]) for k in sd)

    shutil.copyfile(models_root / src / "tokens.txt", out / "tokens.txt")
    if not qwen2moe:
        ids = torch.tensor([int(t) for t in (hf_dir / "tokens.txt").read_text().split()])
        hf_logits = torch.from_numpy(np.fromfile(hf_dir / "logits.bin", dtype="<f4").reshape(len(ids), -1))
        hf_greedy = [int(t) for t in (hf_dir / "greedy.txt").read_text().split()]
    Fe = cfg.intermediate_size if mixtral else cfg.moe_intermediate_size
    bs = gguf.GGML_QUANT_SIZES[Q.Q8_0][0]
    meta = {
        "source": src, "source_files": ["model.safetensors", "config.json", "tokens.txt"],
        "tokens_file": "tokens.txt", "n_tokens": len(ids),
        "general.architecture": gguf.MODEL_ARCH_NAMES[arch],
        "qk_permuted": permute,
        "rope_in_llama_cpp": "NORM: adjacent pairs (2i, 2i+1) of the GGUF rows" if mixtral
                             else "NEOX: pairs (i, i + D/2), rows as in HF",
        "router_in_llama_cpp": "build_moe_ffn: softmax over all experts -> top-k -> weights divided "
                               "by their sum (norm_w = true, hard-coded; no expert_weights_norm key)",
        "q8_0_block_dims": {"hidden": cfg.hidden_size, "hidden_multiple_of_32": cfg.hidden_size % bs == 0,
                            "expert_ffn": Fe, "expert_ffn_multiple_of_32": Fe % bs == 0},
        "reference": "logits-<v>.bin: transformers, model in float64 (eager attention and experts, "
                     "router softmax kept in float64 as make_moe_fixtures does; transformers itself "
                     "still computes RMSNorm, the attention softmax and the RoPE cos/sin in float32, "
                     "as for every fixture here: ~2e-6 from a true float64 forward, see "
                     "independent_numpy_forward_max_abs_diff) on the weights read back from "
                     "model-<v>.gguf (dequantized, experts unstacked, Q/K permutation undone), stored "
                     "float32 [tokens, vocab]; greedy-<v>.txt: 8 ids by full recomputation (no KV cache)",
        "independent_check": "a float64 numpy forward of the file as stored with llama.cpp's graph "
                             "(RoPE NORM on GGUF rows for llama / NEOX for qwen3moe, build_moe_ffn "
                             "routing), on tokens + greedy (32 positions)",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "gguf": getattr(gguf, "__version__", None) or _pkg_version("gguf"),
                     "numpy": np.__version__},
        "files": {},
    }
    if qwen2moe:
        Fs = cfg.shared_expert_intermediate_size
        assert "~2e-6 from a true float64 forward" in meta["reference"]
        meta.update({
            "source": f"{ALL_SPARSE_DIR} (all-sparse variant of {src}, see source_variant)",
            "source_files": [f"{src}/tokens.txt (the variant's weights are drawn in memory)"],
            "router_in_llama_cpp": "build_moe_ffn: softmax over all experts -> top-k -> the k "
                                   "probabilities as they are (norm_w = false, hard-coded in the qwen2moe "
                                   "graph; no expert_weights_norm key), summed with the shared expert: "
                                   "sigmoid(ffn_gate_inp_shexp . x) * ffn_down_shexp(silu(ffn_gate_shexp x) "
                                   "* ffn_up_shexp x), in every layer",
            "independent_check": "a float64 numpy forward of the file as stored with llama.cpp's qwen2moe "
                                 "graph (q/k/v biases, RoPE NEOX, build_moe_ffn routing without "
                                 "renormalisation, sigmoid-gated shared expert, output = token_embd), on "
                                 "tokens + greedy (32 positions)",
            "reference": meta["reference"].replace("~2e-6 from a true float64 forward", "~1e-5 from a true "
                                                   "float64 forward (q/k biases make RoPE's float32 tables "
                                                   "count more)"),
            "hf_fixture_note": "files.*.max_abs_diff_vs_hf_fixture_logits / greedy_equals_hf_fixture compare "
                               "with the variant's own transformers float64 logits / greedy "
                               "(source_variant; no logits.bin on disk), not with qwen2_moe_tiny's",
            "tied_embeddings": "no output.weight: the checkpoint has no lm_head.weight and the converter "
                               "writes only what it has; the output projection is token_embd",
            "source_variant": variant_info,
            "llama_cpp_limitations": [
                "dense layers: not representable in qwen2moe (see source_variant.why); a qwen2_moe "
                "checkpoint with mlp_only_layers or decoder_sparse_step > 1 fails to convert (ValueError "
                "'Can not map tensor ...mlp.down_proj.weight')",
                "tied embeddings: llama.cpp's qwen2moe loader creates output.weight as required (no "
                "token_embd fallback, unlike qwen2), so llama.cpp itself would refuse this file "
                "('missing tensor output.weight'); real Qwen2-MoE checkpoints are untied",
                "ffn_gate_inp_shexp: ne [64, 1] as the current converter writes the (1, 64) HF weight "
                "(no squeeze); converters that squeezed wrote ne [64]; llama.cpp accepts both "
                "(expects {n_embd}, trailing dims 1)",
            ],
        })
        meta["q8_0_block_dims"].update({"shared_expert_ffn": Fs,
                                        "shared_expert_ffn_multiple_of_32": Fs % bs == 0})
    mmf.set_router_patch(True)
    for variant in VARIANTS:
        path = out / f"model-{variant}.gguf"
        held, notes = write_gguf(path, hf_dir, hub, order, cfg, spec, variant)
        assert sorted(held) == sorted(hub)
        if variant == "f32":
            assert all(np.array_equal(held[k], hub[k].astype(np.float64)) for k in hub)

        # Round trip: the file read back must be exactly the weights the writer encoded.
        gmeta, tensors = read_gguf(path)
        want_ne = expected_ne(cfg, arch)
        got_ne = {n: ne for n, ne, _, _ in tensors}
        assert got_ne == want_ne, (sorted(set(got_ne) ^ set(want_ne)),
                                   {n: (got_ne[n], want_ne[n]) for n in got_ne
                                    if n in want_ne and got_ne[n] != want_ne[n]})
        rebuilt = hub_from_gguf(tensors, cfg, arch)
        assert sorted(rebuilt) == sorted(held)
        for k in held:
            assert rebuilt[k].shape == held[k].shape and np.array_equal(rebuilt[k], held[k]), k
        assert gmeta["general.architecture"] == gguf.MODEL_ARCH_NAMES[arch]
        assert gmeta["general.file_type"] == int(VARIANTS[variant])

        m64 = copy.deepcopy(model).double()
        m64.load_state_dict(with_tied_head(from_hub({k: torch.from_numpy(v) for k, v in rebuilt.items()},
                                                    mixtral, cfg.num_hidden_layers, E), cfg), strict=True)
        with torch.no_grad():
            logits = m64(ids[None]).logits[0]
        mf.write_f32(out / f"logits-{variant}.bin", logits.numpy())
        gen, margin = mf.greedy_no_cache(m64, ids, mf.N_GREEDY)
        mf.write_ids(out / f"greedy-{variant}.txt", [gen.tolist()])

        # Independent numpy forward of the stored tensors (llama.cpp semantics), tokens + greedy.
        full = torch.cat([ids, gen])
        with torch.no_grad():
            l_full = m64(full[None]).logits[0].numpy()
        # (transformers keeps RMSNorm, the attention softmax and the RoPE tables in float32 even in
        # a float64 model, so the two differ by ~1e-6; a wrong convention would differ by O(1).)
        l_np, router_gap, routes = gguf_forward(gmeta, tensors, full.numpy())
        if variant == "f32":
            routes_f32 = routes
        changed = [[li, t] for li, (a, b) in enumerate(zip(routes, routes_f32))
                   for t, (x, y) in enumerate(zip(a, b)) if x != y]
        indep = float(np.abs(l_np - l_full).max())
        assert indep < 2e-5, (name, variant, indep)

        diff_hf = float((logits - hf_logits.double()).abs().max())
        if variant == "f32":
            assert diff_hf < 1e-5 and gen.tolist() == hf_greedy, (diff_hf, gen.tolist(), hf_greedy)
        types = {n: t for n, _, t, _ in tensors}
        meta["files"][path.name] = {
            "bytes": path.stat().st_size,
            "general.file_type": gmeta["general.file_type"],
            "logits_file": f"logits-{variant}.bin", "greedy_file": f"greedy-{variant}.txt",
            "logits_shape": list(logits.shape), "greedy": gen.tolist(),
            "greedy_min_top1_top2_margin": margin,
            "max_abs_diff_vs_hf_fixture_logits": diff_hf,
            "greedy_equals_hf_fixture": gen.tolist() == hf_greedy,
            "independent_numpy_forward_max_abs_diff": indep,
            "router_min_gap_kth_vs_next_prob": router_gap,
            "router_positions": "tokens.txt + greedy-<v>.txt (32 positions)",
            "routing_differs_from_f32_file_at": changed if gen.tolist() == hf_greedy else "greedy differs",
            "type_counts": {t: sum(1 for v in types.values() if v == t) for t in sorted(set(types.values()))},
            "fallbacks": notes,
            "tensors": {n: {"ne": ne, "type": t} for n, ne, t, _ in tensors},
            "metadata": summarize_meta(gmeta),
        }
        print(f"{name} {variant}: {path.stat().st_size} bytes, greedy {gen.tolist()} (margin {margin:.4f}), "
              f"|logits - hf| {diff_hf:.2e}, numpy check {indep:.1e}, router gap {router_gap:.2e}, "
              f"routing changes vs f32 (layer, position) {changed}, "
              f"types {meta['files'][path.name]['type_counts']}")
    mmf.set_router_patch(False)
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    if tmp is not None:
        tmp.cleanup()
    size = sum(p.stat().st_size for p in out.iterdir())
    assert size < 1_500_000, size
    print(f"{out}: {size} bytes")


def _pkg_version(name):
    from importlib.metadata import version
    return version(name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = Path(__file__).resolve().parent.parent / "tests/fixtures/models"
    ap.add_argument("--out", default=str(root), help="where <name>_gguf/ go (sources are read from here too)")
    ap.add_argument("--only", nargs="*", default=None, help="subset of " + ", ".join(SPECS))
    args = ap.parse_args()
    torch.set_num_threads(1)
    mf.check_permutation_convention()
    out_root = Path(args.out)
    for name in args.only or SPECS:
        make_one(name, out_root, out_root)


if __name__ == "__main__":
    main()
