#!/usr/bin/env python3
"""Writes tests/fixtures/io/quants.gguf: one small tensor of every block-quant type tensorpar
loads (the types llama.cpp's common presets write, and their fallbacks), each beside its
reference dequantization by the gguf package (gguf.quants.dequantize), plus one type tensorpar
does not load (IQ2_XXS) for the error path.

  <type>.weight     [2, 512] raw blocks: random bytes, the f16 scale fields set to finite values
                    in [-0.05, 0.05] so every bit pattern of quants and sub-block scales occurs
  <type>.expected   [2, 512] F32: gguf.quants.dequantize of <type>.weight
  iq2_xxs.weight    [1, 256] raw IQ2_XXS blocks (recognised, not loadable)

Run: PY=$(tools/venv.sh) && "$PY" tools/make_quant_fixtures.py   (byte-identical on every run)
"""
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Byte offsets of each block's f16 fields (ggml's block structs).
F16_FIELDS = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0], Q.IQ4_NL: [0],
    Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208],
}


def random_blocks(rng, qtype, rows, cols):
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block_elems
    blocks = rng.integers(0, 256, size=(nb, block_bytes), dtype=np.uint8)
    for off in F16_FIELDS.get(qtype, [0]):
        blocks[:, off:off + 2] = rng.uniform(-0.05, 0.05, size=(nb, 1)).astype(np.float16).view(np.uint8)
    return blocks.reshape(rows, cols // block_elems * block_bytes)


def main():
    out = os.path.join(ROOT, "tests", "fixtures", "io", "quants.gguf")
    rng = np.random.default_rng(20250611)
    w = gguf.GGUFWriter(out, "llama")
    for qtype in F16_FIELDS:
        name = qtype.name.lower()
        data = random_blocks(rng, qtype, 2, 512)
        w.add_tensor(f"{name}.weight", data, raw_dtype=qtype)
        w.add_tensor(f"{name}.expected", gguf.quants.dequantize(data, qtype).astype(np.float32))
    w.add_tensor("iq2_xxs.weight", random_blocks(rng, Q.IQ2_XXS, 1, 256), raw_dtype=Q.IQ2_XXS)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(out, os.path.getsize(out))


if __name__ == "__main__":
    main()
