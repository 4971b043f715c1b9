#!/usr/bin/env python3
"""The tokenizer.json files that tokenizer_json_writer.h writes, loaded by HF `tokenizers`, give the
ids and text of tensorpar's GGUF tokenizer.

The gtest TokenizerJsonWriter.* (tests/tokenizer/tokenizer_json_writer_test.cpp), run with
TP_TOKENIZER_JSON_DUMP=DIR, writes DIR/<vocab>/{tokenizer.json, tokenizer_config.json} from each
GGUF vocabulary it tests, and expected.json: for every valid UTF-8 text of the tokenizer fixtures,
the ids of Tokenizer::from_gguf with special tokens parsed (`ids`) and as plain text
(`ids_no_special`) and its decoding of `ids`; and random id sequences with their decoded text.
Here each text is encoded by `tokenizers` (add_special_tokens False, and True: BOS first when the
vocabulary adds it), again with encode_special_tokens (special tokens as plain text), and every
id sequence is decoded with skip_special_tokens False. When `transformers` is importable too, the
directory is also loaded with AutoTokenizer (tokenizer_config.json: class, bos/eos) and each text
encoded with its defaults (BOS as the vocabulary says) and decoded.

Usage:
  check_written_tokenizer_json.py TEST_BINARY   runs TEST_BINARY (build-*/bin/test_tokenizer) into
                                                a temporary directory, then checks it
  check_written_tokenizer_json.py --dir DIR     checks files dumped before
Without `tokenizers`, it runs itself again with <repo>/.venv/bin/python (tools/venv.sh makes that
venv) when there is one, else exits 77 (ctest's skip code here).
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SKIP = 77
VENV = Path(__file__).resolve().parents[2] / ".venv"


def show(x, n=160):
    s = repr(x)
    return s if len(s) <= n else s[:n] + "..."


def check_vocab(tokenizers, d):
    """Returns (texts, sequences, mismatches) for one dumped vocabulary."""
    tok = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
    exp = json.loads((d / "expected.json").read_text(encoding="utf-8"))
    bos = [exp["bos_id"]] if exp["add_bos"] else []
    cases = exp["encode"]
    texts = [c["text"] for c in cases]
    bad = []
    tok.encode_special_tokens = False
    plain = tok.encode_batch(texts, add_special_tokens=False)
    with_bos = tok.encode_batch(texts, add_special_tokens=True)
    tok.encode_special_tokens = True
    no_special = tok.encode_batch(texts, add_special_tokens=False)
    tok.encode_special_tokens = False
    for c, p, b, n in zip(cases, plain, with_bos, no_special):
        if p.ids != c["ids"]:
            bad.append(f"encode {show(c['text'])}: tokenizers {p.ids}, tensorpar {c['ids']}")
        if b.ids != bos + c["ids"]:
            bad.append(f"encode+bos {show(c['text'])}: tokenizers {b.ids}, tensorpar {bos + c['ids']}")
        if n.ids != c["ids_no_special"]:
            bad.append(f"encode, special as text {show(c['text'])}: tokenizers {n.ids}, "
                       f"tensorpar {c['ids_no_special']}")
        text = tok.decode(c["ids"], skip_special_tokens=False)
        if text != c["decoded"]:
            bad.append(f"decode {c['ids']}: tokenizers {show(text)}, tensorpar {show(c['decoded'])}")
    for c in exp["decode"]:
        text = tok.decode(c["ids"], skip_special_tokens=False)
        if text != c["text"]:
            bad.append(f"decode {c['ids']}: tokenizers {show(text)}, tensorpar {show(c['text'])}")
    return len(cases), len(exp["decode"]), bad


def check_transformers(d):
    """The directory through transformers' AutoTokenizer; returns the mismatches."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(d))
    exp = json.loads((d / "expected.json").read_text(encoding="utf-8"))
    bos = [exp["bos_id"]] if exp["add_bos"] else []
    bad = []
    if bos and tok.bos_token_id != exp["bos_id"]:
        bad.append(f"bos_token_id: transformers {tok.bos_token_id}, tensorpar {exp['bos_id']}")
    for c in exp["encode"]:
        ids = tok(c["text"])["input_ids"]
        if ids != bos + c["ids"]:
            bad.append(f"transformers encode {show(c['text'])}: {ids}, tensorpar {bos + c['ids']}")
        text = tok.decode(c["ids"], skip_special_tokens=False)
        if text != c["decoded"]:
            bad.append(f"transformers decode {c['ids']}: {show(text)}, tensorpar {show(c['decoded'])}")
    return bad


def check_dir(tokenizers, root):
    dirs = sorted(p.parent for p in Path(root).glob("*/expected.json"))
    if not dirs:
        print(f"no */expected.json under {root}", file=sys.stderr)
        return 1
    try:
        import transformers
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        with_transformers = f", transformers {transformers.__version__}"
    except ImportError:
        with_transformers = ""
        print("transformers not importable: AutoTokenizer not checked")
    failed = 0
    for d in dirs:
        n_texts, n_seqs, bad = check_vocab(tokenizers, d)
        what = f"{n_texts} texts x 3 encodings + decode, {n_seqs} id sequences decoded"
        if with_transformers:
            bad += check_transformers(d)
            what += ", AutoTokenizer"
        status = "ok" if not bad else f"{len(bad)} MISMATCHES"
        print(f"{d.name}: {what}: {status}")
        for line in bad[:10]:
            print("  " + line)
        failed += bool(bad)
    print(f"tokenizers {tokenizers.__version__}{with_transformers}: {len(dirs) - failed} of "
          f"{len(dirs)} vocabularies match")
    return 1 if failed else 0


def main():
    try:
        import tokenizers
    except ImportError:
        python = VENV / "bin" / "python"
        if python.exists() and Path(sys.prefix).resolve() != VENV.resolve():
            os.execv(str(python), [str(python), __file__] + sys.argv[1:])
        print(f"SKIP: the Python package `tokenizers` is importable neither by {sys.executable} "
              f"nor by {python} (tools/venv.sh makes that venv)")
        return SKIP
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "--dir":
        return check_dir(tokenizers, args[1])
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tp_tokjson_") as tmp:
        env = dict(os.environ, TP_TOKENIZER_JSON_DUMP=tmp)
        run = subprocess.run([args[0], "--gtest_filter=TokenizerJsonWriter.*Trips*"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        summary = [l for l in run.stdout.splitlines() if l.startswith(("[  ", "[       OK", "[  SKIPPED"))]
        print("\n".join(summary))
        if run.returncode != 0:
            print(run.stdout[-4000:])
            print(f"{args[0]} failed (exit {run.returncode})", file=sys.stderr)
            return 1
        return check_dir(tokenizers, tmp)


if __name__ == "__main__":
    sys.exit(main())
