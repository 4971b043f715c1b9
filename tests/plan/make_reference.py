#!/usr/bin/env python3
"""Reference values for tests/plan: parameter counts of tiny models built by Hugging Face
transformers (model.num_parameters()) and of the default GGUF model (element counts of its tensors
read with the gguf package). Writes tests/plan/reference_models.json.

Usage: PY=$(tools/venv.sh) && "$PY" tests/plan/make_reference.py
"""
import json
import os
import sys

import torch
import transformers as tf

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def entry(name, family, cfg, model_cls, extra):
    torch.manual_seed(0)
    model = model_cls(cfg)
    return dict(name=name, family=family, parameters=int(model.num_parameters()), **extra)


def main():
    out = []
    llama = tf.LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=176,
                           num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2,
                           tie_word_embeddings=False)
    out.append(entry("llama-gqa", "llama", llama, tf.LlamaForCausalLM,
                     dict(layers=3, hidden=64, heads=8, kv_heads=2, head_dim=8, ffn=176,
                          vocab=1000, tied=False, qkv_bias=False)))
    llama_tied = tf.LlamaConfig(vocab_size=512, hidden_size=96, intermediate_size=256,
                                num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=6,
                                tie_word_embeddings=True)
    out.append(entry("llama-tied-mha", "llama", llama_tied, tf.LlamaForCausalLM,
                     dict(layers=2, hidden=96, heads=6, kv_heads=6, head_dim=16, ffn=256,
                          vocab=512, tied=True, qkv_bias=False)))
    qwen = tf.Qwen2Config(vocab_size=800, hidden_size=64, intermediate_size=160,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          tie_word_embeddings=True)
    out.append(entry("qwen2-bias", "llama", qwen, tf.Qwen2ForCausalLM,
                     dict(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=160,
                          vocab=800, tied=True, qkv_bias=True)))
    gpt2 = tf.GPT2Config(vocab_size=700, n_embd=64, n_layer=2, n_head=4, n_positions=128)
    out.append(entry("gpt2", "gpt2", gpt2, tf.GPT2LMHeadModel,
                     dict(layers=2, hidden=64, heads=4, kv_heads=4, head_dim=16, ffn=256,
                          vocab=700, tied=True, positions=128)))
    mixtral = tf.MixtralConfig(vocab_size=600, hidden_size=64, intermediate_size=96,
                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               num_local_experts=4, num_experts_per_tok=2,
                               tie_word_embeddings=False)
    out.append(entry("mixtral-moe", "llama", mixtral, tf.MixtralForCausalLM,
                     dict(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=96,
                          vocab=600, tied=False, qkv_bias=False, experts=4,
                          experts_per_token=2)))
    gguf_path = os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if os.path.exists(gguf_path):
        import gguf
        reader = gguf.GGUFReader(gguf_path)
        count = sum(int(t.n_elements) for t in reader.tensors)

        def field(key):
            f = reader.fields[key]
            return int(f.parts[f.data[0]][0])

        names = {t.name for t in reader.tensors}
        hidden, heads = field("llama.embedding_length"), field("llama.attention.head_count")
        vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
        out.append(dict(name="SmolLM2-135M-Instruct.Q4_1.gguf", family="llama",
                        file="models/SmolLM2-135M-Instruct.Q4_1.gguf", parameters=count,
                        layers=field("llama.block_count"), hidden=hidden, heads=heads,
                        kv_heads=field("llama.attention.head_count_kv"), head_dim=hidden // heads,
                        ffn=field("llama.feed_forward_length"), vocab=vocab,
                        tied="output.weight" not in names, qkv_bias=False))
    path = os.path.join(HERE, "reference_models.json")
    with open(path, "w") as f:
        json.dump({"generated_by": "tests/plan/make_reference.py",
                   "transformers": tf.__version__, "models": out}, f, indent=1)
    print(f"wrote {path}: {len(out)} models", file=sys.stderr)


if __name__ == "__main__":
    main()
