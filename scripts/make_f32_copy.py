#!/usr/bin/env python3
"""Writes an F32 copy of a GGUF model with llama.cpp's own quantize API
(llama_model_quantize, ftype ALL_F32, allow_requantize), for the conformance test and the
CPU benchmark. Usage: make_f32_copy.py SRC.gguf DST.gguf (no-op if DST exists)."""
import ctypes
import os
import sys


def make_f32_copy(src, dst):
    if os.path.exists(dst):
        return
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = 0  # LLAMA_FTYPE_ALL_F32
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 1
    tmp = dst + ".tmp"
    rc = llama_cpp.llama_model_quantize(src.encode(), tmp.encode(), ctypes.byref(params))
    if rc != 0:
        sys.exit(f"make_f32_copy: llama_model_quantize failed ({rc})")
    os.replace(tmp, dst)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    make_f32_copy(sys.argv[1], sys.argv[2])
    print(f"make_f32_copy: {sys.argv[2]}")
