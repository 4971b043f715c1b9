#!/usr/bin/env python3
"""Writes the small reference files that tests/io reads, using the reference Python packages
(gguf for GGUF writing and block (de)quantization, safetensors for safetensors writing):

  tests/fixtures/io/tiny.gguf                   every metadata value type, f32/f16/bf16/q8_0/q4_0/
                                                q4_1 tensors (2-D, 1-D, 3-D), Q4_K/Q5_K/Q6_K and one Q2_K tensor
  tests/fixtures/io/tiny_gguf_expected.safetensors   gguf.quants.dequantize of each loadable tensor
  tests/fixtures/io/tiny_ref.safetensors        written by the safetensors package: several dtypes
                                                and __metadata__

Run: python3 tools/make_io_fixtures.py  (creates .venv with gguf, numpy, safetensors if needed).
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, ".venv")


def ensure_venv():
    try:
        import gguf, numpy, safetensors  # noqa: F401
        return
    except ImportError:
        pass
    py = os.path.join(VENV, "bin", "python")
    if not os.path.exists(py):
        subprocess.check_call([sys.executable, "-m", "venv", VENV])
    subprocess.check_call([py, "-m", "pip", "install", "-q", "gguf", "numpy", "safetensors"])
    os.execv(py, [py] + sys.argv)


def main():
    ensure_venv()
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as Q
    from safetensors.numpy import save_file

    out = os.path.join(ROOT, "tests", "fixtures", "io")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20241129)

    w = gguf.GGUFWriter(os.path.join(out, "tiny.gguf"), "llama")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -5)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -7)
    w.add_float32("test.f32", 1.5)
    w.add_uint64("test.u64", 2**40 + 3)
    w.add_int64("test.i64", -(2**40))
    w.add_float64("test.f64", 2.25)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo ✓")
    w.add_array("test.tokens", ["<s>", "</s>", "a", "Ġb", ""])
    w.add_array("test.i32_array", [1, -2, 3, 2**30])
    w.add_array("test.f32_array", [0.5, -1.25, 3.0])
    w.add_array("test.nested", [[1, 2, 3], ["x", "y"]])
    w.add_block_count(2)
    w.add_embedding_length(64)

    expected = {}

    def add(name, values, qtype):
        if qtype == Q.F32:
            data = values.astype(np.float32)
            w.add_tensor(name, data)
            expected[name] = data
            return
        if qtype == Q.F16:
            data = values.astype(np.float16)
            w.add_tensor(name, data)
            expected[name] = data.astype(np.float32)
            return
        data = gguf.quants.quantize(values.astype(np.float32), qtype)
        w.add_tensor(name, data, raw_dtype=qtype)
        expected[name] = gguf.quants.dequantize(data, qtype).astype(np.float32)

    add("f32.weight", rng.standard_normal((7, 33)), Q.F32)
    add("f16.weight", rng.standard_normal((5, 64)), Q.F16)
    add("bf16.weight", rng.standard_normal((3, 32)), Q.BF16)
    add("q8_0.weight", rng.standard_normal((6, 96)), Q.Q8_0)
    add("q4_0.weight", rng.standard_normal((4, 64)), Q.Q4_0)
    add("q4_1.weight", rng.standard_normal((9, 128)), Q.Q4_1)
    add("norm.weight", rng.standard_normal((33,)), Q.F32)
    add("cube.weight", rng.standard_normal((2, 3, 32)), Q.Q8_0)
    # K-quants: random block bytes with finite f16 scales, dequantized by gguf.quants.
    def add_kquant(name, rows, cols, qtype, f16_fields):
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        nb = rows * cols // block_elems
        blocks = rng.integers(0, 256, size=(nb, block_bytes), dtype=np.uint8)
        for off in f16_fields:
            blocks[:, off:off + 2] = rng.uniform(-0.05, 0.05, size=(nb, 1)).astype(np.float16).view(np.uint8)
        data = blocks.reshape(rows, cols // block_elems * block_bytes)
        w.add_tensor(name, data, raw_dtype=qtype)
        expected[name] = gguf.quants.dequantize(data, qtype).astype(np.float32)

    add_kquant("q4_k.weight", 2, 256, Q.Q4_K, [0, 2])
    add_kquant("q5_k.weight", 3, 512, Q.Q5_K, [0, 2])
    add_kquant("q6_k.weight", 2, 768, Q.Q6_K, [208])
    # Q2_K: arbitrary block bytes (every quant type's values: tools/make_quant_fixtures.py).
    q2k = rng.integers(0, 256, size=(2, 84), dtype=np.uint8)
    w.add_tensor("q2_k.weight", q2k, raw_dtype=Q.Q2_K)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    save_file({k: np.ascontiguousarray(v) for k, v in expected.items()},
              os.path.join(out, "tiny_gguf_expected.safetensors"))

    base = rng.standard_normal((4, 9))
    save_file({
        "a.f32": base.astype(np.float32),
        "a.f64": base.astype(np.float64),
        "a.f16": base.astype(np.float16),
        "a.f16_as_f32": base.astype(np.float16).astype(np.float32),
        "ids.i64": (np.arange(10, dtype=np.int64) * 3 - 7),
        "ids.i32": (np.arange(6, dtype=np.int32) * 5 - 2),
        "bytes.u8": np.arange(5, dtype=np.uint8),
        "mask.bool": np.array([True, False, True]),
        "small.i8": np.array([-1, 2, -3], dtype=np.int8),
        "scalar.f32": np.array(3.5, dtype=np.float32),
        "empty.f32": np.zeros((0, 3), dtype=np.float32),
    }, os.path.join(out, "tiny_ref.safetensors"), metadata={"format": "np", "note": "tensorpar io fixture"})
    for f in sorted(os.listdir(out)):
        print(f, os.path.getsize(os.path.join(out, f)))


if __name__ == "__main__":
    main()
