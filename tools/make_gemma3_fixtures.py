#!/usr/bin/env python3
"""Writes tiny random Gemma3ForCausalLM fixtures under tests/fixtures/models/ with the same files
and references as tools/make_fixtures.py (logits and greedy tokens from transformers in float64,
training references: gradients and params after 3 AdamW steps):

  gemma3_tiny    4 layers, layer_types local/global alternating, sliding window 5 (shorter than
                 the 24 reference tokens and the 16 training tokens), 4 query heads on 1 kv head,
                 query_pre_attn_scalar 24 (not head_dim), final logit soft-capping 30, RoPE
                 bases 1e6 (global) and 1e4 (local), tied embeddings.
  gemma3_pattern 6 layers, no layer_types in config.json (sliding_window_pattern 3: every third
                 layer global), window 7, 2 kv heads, no soft-capping.

Run: PY=$(tools/venv.sh) && "$PY" tools/make_gemma3_fixtures.py [--out tests/fixtures/models]
"""
import argparse
import json
import sys
from pathlib import Path

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures  # noqa: E402  (the shared fixture writer)

SPECS = {
    "gemma3_tiny": (1011, Gemma3ForCausalLM, Gemma3TextConfig, dict(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
        intermediate_size=96, num_hidden_layers=4, vocab_size=256, sliding_window=5,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        query_pre_attn_scalar=24, final_logit_softcapping=30.0, attn_logit_softcapping=None,
        rms_norm_eps=1e-6, max_position_embeddings=128, tie_word_embeddings=True,
        hidden_activation="gelu_pytorch_tanh", attn_implementation="eager"), "v5", True),
    "gemma3_pattern": (1012, Gemma3ForCausalLM, Gemma3TextConfig, dict(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        intermediate_size=64, num_hidden_layers=6, vocab_size=256, sliding_window=7,
        sliding_window_pattern=3,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        query_pre_attn_scalar=16, final_logit_softcapping=None, attn_logit_softcapping=None,
        rms_norm_eps=1e-6, max_position_embeddings=128, tie_word_embeddings=True,
        hidden_activation="gelu_pytorch_tanh", attn_implementation="eager"), "v5", False),
}


def gemma_init_weights(model, seed, conv1d_layout):
    """make_fixtures.init_weights, then Gemma's norm weights (applied as 1 + w) drawn around 0 so
    their multipliers are 1 + N(0, 0.1^2) as the other fixtures', and embeddings N(0, 0.1^2): the
    sqrt(C) scaling would otherwise let the tied head echo the input token."""
    base_init_weights(model, seed, conv1d_layout)
    if not isinstance(model, Gemma3ForCausalLM):
        return
    g = torch.Generator().manual_seed(seed + 5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if p.dim() == 1 and name.endswith("norm.weight"):
                p.copy_((0.1 * r).to(p.dtype))
            elif "embed" in name:
                p.copy_((0.1 * r).to(p.dtype))


base_init_weights = make_fixtures.init_weights


def drop_layer_types(path, pattern):
    """config.json as older Gemma 3 checkpoints write it: the layer pattern only."""
    c = json.loads(path.read_text())
    c.pop("layer_types", None)
    c["sliding_window_pattern"] = pattern
    path.write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/models"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    out_root = Path(args.out)
    make_fixtures.SPECS.update(SPECS)
    make_fixtures.init_weights = gemma_init_weights
    for name in SPECS:
        model, _ = make_fixtures.make_one(name, out_root)
        if name == "gemma3_pattern":
            drop_layer_types(out_root / name / "config.json", 3)
            # The rewritten config must load back to the same layer pattern.
            back = Gemma3ForCausalLM.from_pretrained(out_root / name, dtype=torch.float32)
            assert back.config.layer_types == model.config.layer_types, (back.config.layer_types,
                                                                         model.config.layer_types)
        print(name, "layer_types", model.config.layer_types)


if __name__ == "__main__":
    main()
