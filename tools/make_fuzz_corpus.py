#!/usr/bin/env python3
"""Writes the seed corpora of the libFuzzer targets (tests/fuzz/corpus/<target>/): small, valid
inputs of each parser, so fuzzing starts from files that load and mutates from there.

  fuzz_tokenizer_json     the tokenizer fixtures (tests/fixtures/tokenizer/*.tokenizer.json) cut
                          to their first tokens and the merges among them (BPE byte-level and
                          SentencePiece-style, Unigram, WordPiece, character BPE), a Llama 3
                          layout with a TemplateProcessing post-processor, and two followed by
                          NUL + a tokenizer_config.json (bos/eos, a chat template as a string
                          and as a list)
  fuzz_chat_template      the real templates of tests/fixtures/tokenizer/chat_templates.json,
                          each followed by NUL-separated message contents
  fuzz_hf_config          the config.json of every model fixture (tests/fixtures/models/*/)
  fuzz_checkpoint_index   index.json files of the shape write_checkpoint_index writes (1 and 2
                          files, sharded and replicated pieces, a full trainer state)
  fuzz_server_json        OpenAI request bodies as the README, tests/serve and the SDKs send
  fuzz_safetensors        a small safetensors file (several dtypes, __metadata__)
  fuzz_gguf               a small GGUF file (metadata of several types, f32/f16/q8_0 tensors)

Standard library only. Run: python3 tools/make_fuzz_corpus.py (rewrites the directories).
"""
import glob
import json
import os
import shutil
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")
LIMIT = 4096  # bytes per seed, about


def compact(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---- tokenizer.json ----

def merge_parts(m):
    if isinstance(m, list):
        return m[0], m[1]
    sp = m.find(" ", 1)
    return m[:sp], m[sp + 1:]


def cut_tokenizer(j, keep):
    """The tokenizer with the vocabulary's first `keep` ids, the merges among them, and its added
    tokens renumbered after them (those with ids past `keep`)."""
    j = json.loads(json.dumps(j))
    m = j["model"]
    remap = {}
    if isinstance(m["vocab"], list):  # Unigram
        m["vocab"] = m["vocab"][:keep]
        next_id = len(m["vocab"])
    else:
        vocab = {k: v for k, v in m["vocab"].items() if v < keep}
        next_id = max(vocab.values()) + 1
        if "merges" in m:
            merges = []
            for x in m["merges"]:
                a, b = merge_parts(x)
                if a in vocab and b in vocab and a + b in vocab:
                    merges.append(x)
            m["merges"] = merges
        m["vocab"] = vocab
    added = []
    for a in j.get("added_tokens") or []:
        if a["id"] >= keep:
            if len(added) >= 6:
                continue
            remap[a["id"]] = next_id
            a["id"] = next_id
            next_id += 1
        added.append(a)
    j["added_tokens"] = added
    return j, remap


def cut_to_limit(j, limit=LIMIT):
    lo, hi = 8, len(j["model"]["vocab"])
    best = None
    while lo <= hi:
        mid = (lo + hi) // 2
        t, _ = cut_tokenizer(j, mid)
        if len(compact(t)) <= limit:
            best, lo = t, mid + 1
        else:
            hi = mid - 1
    return best


def tokenizers():
    t = "fuzz_tokenizer_json"
    fixtures = {}
    for path in sorted(glob.glob(os.path.join(FIXTURES, "tokenizer", "*.tokenizer.json"))):
        name = os.path.basename(path).split(".")[0]
        with open(path, encoding="utf-8") as f:
            fixtures[name] = json.load(f)
        # Byte-level vocabularies need their 256 byte tokens before any merge: a larger budget.
        limit = 6144 if name in ("gpt2_trained", "llama3", "qwen2_trained") else LIMIT
        write(t, name + ".json", compact(cut_to_limit(fixtures[name], limit)))
    # Llama 3's layout: a TemplateProcessing post-processor whose first special token is bos.
    llama3 = cut_to_limit(fixtures["llama3"], 6144)
    bos = next(a for a in llama3["added_tokens"] if a["content"] == "<|begin_of_text|>")
    llama3["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos["id"]],
                                                 "tokens": ["<|begin_of_text|>"]}},
    }
    write(t, "llama3_template_processing.json", compact(llama3))
    # With a tokenizer_config.json after a NUL byte: bos/eos as objects, the chat template.
    with open(os.path.join(FIXTURES, "tokenizer", "chat_templates.json"), encoding="utf-8") as f:
        templates = {c["template_name"]: c["template"] for c in json.load(f)}
    gpt2 = cut_to_limit(fixtures["gpt2_trained"], 6144)
    config = {"add_bos_token": False, "bos_token": "<|endoftext|>",
              "eos_token": {"content": "<|endoftext|>", "special": True},
              "chat_template": templates["smollm2"]}
    write(t, "gpt2_trained_with_config.json", compact(gpt2) + b"\0" + compact(config))
    spm = cut_to_limit(fixtures["spm_bpe"])
    config = {"add_bos_token": True, "bos_token": {"content": "<s>"}, "eos_token": "</s>",
              "chat_template": [{"name": "default", "template": templates["llama3"]},
                                {"name": "tool_use", "template": "{{ messages }}"}]}
    write(t, "spm_bpe_with_config.json", compact(spm) + b"\0" + compact(config))


# ---- chat templates ----

def chat_templates():
    with open(os.path.join(FIXTURES, "tokenizer", "chat_templates.json"), encoding="utf-8") as f:
        cases = json.load(f)
    seen = set()
    for c in cases:
        name = c["template_name"]
        contents = [m["content"] for m in c["messages"]]
        key = (name, len(contents))
        if key in seen:
            continue
        seen.add(key)
        data = "\0".join([c["template"]] + contents).encode()
        write("fuzz_chat_template", f"{name}_{len(contents)}.txt", data)


# ---- config.json ----

def hf_configs():
    for path in sorted(glob.glob(os.path.join(FIXTURES, "models", "*", "config.json"))):
        name = os.path.basename(os.path.dirname(path))
        shutil.copyfile(path, os.path.join(OUT, "fuzz_hf_config", name + ".json"))


# ---- index.json ----

def checkpoint_indexes():
    config = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": None,
              "eos_token_id": None, "head_dim": 16, "hidden_act": "silu", "hidden_size": 64,
              "intermediate_size": 128, "max_position_embeddings": 64, "mlp_bias": False,
              "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2,
              "num_key_value_heads": 2, "rms_norm_eps": 1e-05, "rope_scaling": None,
              "rope_theta": 10000.0, "tie_word_embeddings": True, "torch_dtype": "float32",
              "vocab_size": 256}
    run = {"batch": 4, "bf16": False, "clip": 1.0, "data": "corpus.txt", "eval-batches": 4,
           "eval-every": 0, "keep-every": 0, "keep-last": 0, "lr": 0.003, "max-data-tokens": 0,
           "micro-batch": 2, "min-lr": 0.0, "moe-aux-loss-coef": -1.0, "moe-capacity-factor": 0.0,
           "moe-z-loss-coef": 0.0, "recompute-layers": 0, "save-every": 2, "seed": 5, "seq": 16,
           "steps": 6, "val-fraction": 0.05, "warmup": 2, "weight-decay": 0.1}

    def state(tp, step):
        return {"config": config, "data": "corpus.txt", "optimizer_steps": step, "pp": 1,
                "run": run, "schedule": {"lr": 0.003, "min_lr": 0.0, "steps": 6, "warmup": 2},
                "seed": 5, "step": step, "tokenizer": "tokenizer.json", "tp": tp}

    def index(n_files, tensors, st):
        files = ["rank-%05d-of-%05d.safetensors" % (r, n_files) for r in range(n_files)]
        return {"file_bytes": [4096 + 512 * r for r in range(n_files)],
                "file_xxh64": ["%016x" % (0x9E3779B97F4A7C15 * (r + 1) % 2**64) for r in range(n_files)],
                "files": files, "format": "tensorpar-sharded-checkpoint-v1", "n_files": n_files,
                "state": st, "tensors": tensors}

    def sharded(shape, dim, ranges, files=None):
        pieces = [{"begin": b, "end": e, "file": (files[i] if files else i), "shard_dim": dim}
                  for i, (b, e) in enumerate(ranges)]
        return {"global_shape": shape, "pieces": pieces, "shard_dim": dim}

    def replicated(shape):
        return {"global_shape": shape, "pieces": [{"begin": 0, "end": shape[0] if shape else 0,
                                                  "file": 0, "shard_dim": -1}], "shard_dim": -1}

    t2 = {}
    for prefix in ("param/", "exp_avg/", "exp_avg_sq/"):
        t2[prefix + "model.embed_tokens.weight"] = sharded([256, 64], 0, [(0, 128), (128, 256)])
        t2[prefix + "model.layers.0.self_attn.q_proj.weight"] = sharded([64, 64], 0, [(0, 32), (32, 64)])
        t2[prefix + "model.layers.0.self_attn.o_proj.weight"] = sharded([64, 64], 1, [(0, 32), (32, 64)])
        t2[prefix + "model.layers.0.mlp.gate_proj.weight"] = sharded([128, 64], 0, [(0, 64), (64, 128)])
        t2[prefix + "model.layers.0.input_layernorm.weight"] = replicated([64])
    write("fuzz_checkpoint_index", "tp2.json", json.dumps(index(2, t2, state(2, 4)), indent=1))
    t1 = {"param/model.embed_tokens.weight": sharded([256, 64], 0, [(0, 256)]),
          "param/model.norm.weight": replicated([64]),
          "param/model.layers.1.mlp.down_proj.weight": sharded([64, 128], 1, [(0, 128)])}
    write("fuzz_checkpoint_index", "tp1.json", json.dumps(index(1, t1, state(1, 2)), indent=1))
    # Three pieces written at tp 3 along dim 0, one empty; and a GGUF llama run's config.
    t3 = {"param/model.layers.0.self_attn.k_proj.weight": sharded([32, 64], 0, [(0, 16), (16, 32), (32, 32)]),
          "param/scalar": {"global_shape": [], "pieces": [{"begin": 0, "end": 0, "file": 0, "shard_dim": -1}],
                           "shard_dim": -1}}
    st = state(3, 6)
    st["config_interleaved_rope"] = dict(config, tensorpar_rope_layout="interleaved")
    del st["config"]
    del st["run"]
    write("fuzz_checkpoint_index", "tp3_interleaved.json", json.dumps(index(3, t3, st), indent=1))


# ---- request bodies ----

def server_bodies():
    bodies = {
        "readme_chat": {"messages": [{"role": "user", "content": "What is the capital of France?"}],
                        "temperature": 0, "max_tokens": 32},
        "readme_completion_stream": {"prompt": "The three primary colors are", "max_tokens": 12,
                                     "temperature": 0, "stream": True},
        "chat_full": {"model": "SmolLM2-135M-Instruct", "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
            {"role": "assistant", "content": None},
            {"role": "user", "content": "Caf\u00e9 \u65e5\u672c \U0001F917"}],
            "max_completion_tokens": 16, "temperature": 0.7, "top_p": 0.9, "top_k": 40,
            "min_p": 0.05, "seed": -3, "stop": ["\n\n", "User:"], "frequency_penalty": 0.5,
            "presence_penalty": -0.5, "repetition_penalty": 1.1, "logprobs": True,
            "top_logprobs": 3, "stream": True, "stream_options": {"include_usage": True},
            "user": "u-1", "n": 1, "logit_bias": {}, "tools": [], "ignore_eos": True,
            "response_format": {"type": "text"}},
        "completion_ids": {"model": "m", "prompt": [1, 2, 3, 255], "max_tokens": 8,
                           "temperature": 0, "logprobs": 2, "echo": False, "best_of": 1,
                           "suffix": None, "ignore_eos": True},
        "completion_batch_of_one": {"prompt": [[5, 6, 7]], "max_tokens": 4, "stop": "x"},
        "completion_text_list": {"prompt": ["hello"], "seed": 18446744073709551615},
        "chat_bad_role": {"messages": [{"role": "wizard", "content": "hi"}]},
        "completion_bad_id": {"prompt": [1, -5, 3], "max_tokens": 0},
    }
    for name, b in bodies.items():
        write("fuzz_server_json", name + ".json", json.dumps(b))
    write("fuzz_server_json", "truncated.json", b'{"model": "x", "messages": [')


# ---- safetensors / GGUF ----

def safetensors_file():
    tensors = [("a", "F32", [2, 3], struct.pack("<6f", *[0.5 * i for i in range(6)])),
               ("b", "F16", [4], struct.pack("<4H", 0x3C00, 0xC000, 0x7BFF, 0x0001)),
               ("c", "BF16", [2, 2], struct.pack("<4H", 0x3F80, 0x4000, 0xBF80, 0x7F80)),
               ("d", "I8", [3], struct.pack("<3b", -1, 0, 127)),
               ("e", "F32", [0, 4], b"")]
    header, data = {"__metadata__": {"format": "pt", "shard:a": "x"}}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    write("fuzz_safetensors", "small.safetensors", struct.pack("<Q", len(h)) + h + data)


def gguf_file():
    def string(s):
        b = s.encode()
        return struct.pack("<Q", len(b)) + b

    def kv(key, vtype, payload):
        return string(key) + struct.pack("<I", vtype) + payload

    kvs = [kv("general.architecture", 8, string("llama")),
           kv("general.alignment", 4, struct.pack("<I", 32)),
           kv("llama.block_count", 4, struct.pack("<I", 1)),
           kv("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)),
           kv("general.flag", 7, struct.pack("<?", True)),
           kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + string("a") + string("b") + string("ab")),
           kv("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 3) + struct.pack("<3f", 0, -1, -2)),
           kv("general.size", 10, struct.pack("<Q", 12345)),
           kv("general.offset", 11, struct.pack("<q", -7))]
    # (name, dims (ggml order: innermost first), ggml type, data)
    q8 = struct.pack("<e", 0.5) + bytes(range(32))
    tensors = [("f32", [4, 2], 0, struct.pack("<8f", *range(8))),
               ("f16", [4], 1, struct.pack("<4e", 1, -2, 0.5, 65504)),
               ("q8_0", [32, 2], 8, q8 + q8)]
    infos, data = b"", b""
    for name, dims, gtype, raw in tensors:
        data += b"\0" * (-len(data) % 32)
        infos += string(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
        infos += struct.pack("<IQ", gtype, len(data))
        data += raw
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs) + infos
    head += b"\0" * (-len(head) % 32)
    write("fuzz_gguf", "small.gguf", head + data)


def main():
    targets = ["fuzz_tokenizer_json", "fuzz_chat_template", "fuzz_hf_config", "fuzz_checkpoint_index",
               "fuzz_server_json", "fuzz_safetensors", "fuzz_gguf"]
    for t in targets:
        d = os.path.join(OUT, t)
        # Regenerated seeds only: inputs kept for their findings (crash-*, regression-*) stay.
        if os.path.isdir(d):
            for f in os.listdir(d):
                if not f.startswith(("crash-", "regression-")):
                    os.remove(os.path.join(d, f))
        os.makedirs(d, exist_ok=True)
    tokenizers()
    chat_templates()
    hf_configs()
    checkpoint_indexes()
    server_bodies()
    safetensors_file()
    gguf_file()
    total = 0
    for t in targets:
        files = glob.glob(os.path.join(OUT, t, "*"))
        size = sum(os.path.getsize(f) for f in files)
        total += size
        print(f"{t}: {len(files)} files, {size} bytes")
    print(f"total: {total} bytes")


if __name__ == "__main__":
    main()
