"""Greedy continuations of the tiny reference models under a repetition penalty, by transformers.

For each fixture in tests/fixtures/models (made by tools/make_fixtures.py), runs
`generate(do_sample=False, repetition_penalty=R)` from its tokens.txt and checks the result
against an independent float64 loop (full recomputation, the penalty applied by hand: a logit of
a token in the prompt or generated so far is divided by R if positive, multiplied if negative).
Writes greedy_repetition.json next to the fixture: the penalty, the new ids, the smallest
top-1 / top-2 gap after the penalty, and the versions used. tests/infer/fixture_generate_test.cpp
requires `tensorpar`'s generation loop to produce the same ids at every TP size.

    PY=$(tools/venv.sh) && "$PY" tools/make_penalty_fixtures.py
"""
import json
import pathlib

import torch
import transformers

ROOT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "models"
MODELS = ["llama_gqa", "llama_odd", "qwen2_bias", "gpt2"]
PENALTY = 1.3
N_NEW = 12


def penalised_greedy(model, ids, n, penalty):
    seq = ids.clone()
    margin = float("inf")
    with torch.no_grad():
        for _ in range(n):
            last = model(seq[None]).logits[0, -1].clone()
            seen = torch.unique(seq)
            x = last[seen]
            last[seen] = torch.where(x > 0, x / penalty, x * penalty)
            top2 = torch.topk(last, 2).values
            margin = min(margin, float(top2[0] - top2[1]))
            seq = torch.cat([seq, last.argmax().view(1)])
    return seq[len(ids):], margin


def main():
    torch.manual_seed(0)
    for name in MODELS:
        d = ROOT / name
        ids = torch.tensor([int(t) for t in (d / "tokens.txt").read_text().split()])
        model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64).eval()
        with torch.no_grad():
            gen = model.generate(ids[None], max_new_tokens=N_NEW, do_sample=False, num_beams=1,
                                 repetition_penalty=PENALTY, eos_token_id=None,
                                 pad_token_id=0)[0, len(ids):]
        mine, margin = penalised_greedy(model, ids, N_NEW, PENALTY)
        assert gen.tolist() == mine.tolist(), (name, gen.tolist(), mine.tolist())
        plain = (d / "greedy.txt").read_text().split()
        out = {"repetition_penalty": PENALTY, "new_tokens": gen.tolist(),
               "min_top1_top2_margin": margin,
               "differs_from_unpenalised_greedy": [str(t) for t in gen.tolist()[:len(plain)]] != plain,
               "reference_compute": "float64 (transformers generate, checked by a hand-written loop)",
               "torch": torch.__version__, "transformers": transformers.__version__}
        (d / "greedy_repetition.json").write_text(json.dumps(out, indent=2) + "\n")
        print(f"{name}: {gen.tolist()} margin {margin:.4f} "
              f"(differs from plain greedy: {out['differs_from_unpenalised_greedy']})")


if __name__ == "__main__":
    main()
