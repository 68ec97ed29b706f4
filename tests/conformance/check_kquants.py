#!/usr/bin/env python3
"""Reading the types LIO cannot write against gguf-py (llama.cpp's own Python package,
gguf.quants): random Q4_K and Q6_K super-blocks and Q5_0 / Q5_1 blocks (every scale and quant
pattern, sane f16 scales; the mix of llama.cpp's Q4_K_M files) are written
to a GGUF with gguf-py, converted to f32 by `lio quantize --keep f32:blk` (which reads each
row with lio::dequantize_row), read back with gguf-py, and compared with gguf-py's own
dequantization. Exit 0 when every value matches."""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import dequantize

# Elements and bytes per block and where its f16 scales sit (ggml-common.h).
KQUANTS = {
    "q4_k": (GGMLQuantizationType.Q4_K, 256, 144, [0, 2]),  # d, dmin first
    "q6_k": (GGMLQuantizationType.Q6_K, 256, 210, [208]),   # d last
    "q5_0": (GGMLQuantizationType.Q5_0, 32, 22, [0]),       # d, qh[4], qs[16]
    "q5_1": (GGMLQuantizationType.Q5_1, 32, 24, [0, 2]),    # d, m, qh[4], qs[16]
}


def random_blocks(rng, rows, n_blocks, block_bytes, scale_offsets):
    raw = rng.integers(0, 256, size=(rows, n_blocks, block_bytes), dtype=np.uint8)
    for off in scale_offsets:
        scales = rng.uniform(1e-4, 2e-2, size=(rows, n_blocks)).astype(np.float16)
        raw[:, :, off:off + 2] = scales.view(np.uint8).reshape(rows, n_blocks, 2)
    return raw.reshape(rows, n_blocks * block_bytes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lio", required=True)
    a = ap.parse_args()
    rng = np.random.default_rng(2026)
    rows, cols = 8, 1024  # 4 super-blocks per row
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "k.gguf"), os.path.join(d, "f.gguf")
        w = GGUFWriter(src, "llama")
        raws = {}
        for name, (qtype, block_elems, block_bytes, offsets) in KQUANTS.items():
            raw = random_blocks(rng, rows, cols // block_elems, block_bytes, offsets)
            raws[name] = (qtype, raw)
            w.add_tensor(f"blk.0.{name}.weight", raw, raw_dtype=qtype)  # shape from the bytes
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        r = subprocess.run([a.lio, "quantize", "--model", src, "--out", out, "--bits", "8", "--keep", "f32:blk",
                            "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            print("FAIL: lio quantize:", r.stderr.strip())
            return 1
        got = {t.name: t for t in GGUFReader(out).tensors}
        ok = True
        for name, (qtype, raw) in raws.items():
            t = got[f"blk.0.{name}.weight"]
            ours = np.asarray(t.data, dtype=np.float32).reshape(rows, cols)
            want = dequantize(raw, qtype).astype(np.float32).reshape(rows, cols)
            diff = float(np.max(np.abs(ours - want)))
            scale = float(np.max(np.abs(want)))
            exact = int(np.sum(ours == want))
            good = t.tensor_type == GGMLQuantizationType.F32 and diff <= 1e-6 * scale
            print(f"{name}: {rows}x{cols}, max |lio - gguf-py| = {diff:.3g} (max |x| {scale:.3g}), "
                  f"{exact}/{rows * cols} bit-identical: {'ok' if good else 'MISMATCH'}")
            ok = ok and good
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
