#!/usr/bin/env python3
"""check_layers.py — fails when a file of the engine includes a header from a layer above it.

The engine core is layered like ggml under llama.cpp (kernels/ is our ggml: its base/ holds the
types everything shares, as ggml-base does): each layer may include its own headers
and those of the layers below it, never one above. From the bottom up:

    base      kernels/base     errors, dtypes and block layouts, weight views, RoPE style
    kernels   kernels/cpu, kernels/cuda
    formats   common/formats   mmap, GGUF, safetensors, tokenizer
    parallel  common/parallel  communicators (single, MPI, NCCL), chapter 08's shard math
    model     common/model     config, loader, forward batch, KV pool, backends, model, runner
    engine    common/engine    blocks, prefix cache, sequence, scheduler, engine
    tools     common/tools     offline: quantize, calibration, GQA/MLA conversion, perplexity
    cli       common/cli       the flags every program shares

`engine` and `tools` are siblings: neither includes the other (offline tools stay out of the
serving core, and the serving core out of the tools). Everything outside these folders
(chapters/, tests/, bench/, solutions/, exercises/) sits on top and may include anything.

A quoted include ("lio/x.h", "cpu_ops.h", "cuda_device_memory.h") is resolved first beside
the including file, then in every layer's include folder; system includes (<...>) are not
checked. Exit status 0 when every arrow points down, 1 otherwise (each offending line is
printed as FILE:LINE: layer A includes HEADER of layer B), 2 for a header that resolves to no
file or to several.

Usage: scripts/check_layers.py [--root DIR]     check the tree (default: the repo root)
       scripts/check_layers.py --self-test      prove the check catches an upward include
"""
import argparse
import os
import re
import sys
import tempfile

# layer -> folders (relative to the root) whose files belong to it
LAYERS = {
    "base": ["kernels/base"],
    "kernels": ["kernels/cpu", "kernels/cuda"],
    "formats": ["common/formats"],
    "parallel": ["common/parallel"],
    "model": ["common/model"],
    "engine": ["common/engine"],
    "tools": ["common/tools"],
    "cli": ["common/cli"],
}
# layer -> layers whose headers it may include (itself included)
ALLOWED = {
    "base": {"base"},
    "kernels": {"base", "kernels"},
    "formats": {"base", "formats"},
    "parallel": {"base", "parallel"},
    "model": {"base", "kernels", "formats", "parallel", "model"},
    "engine": {"base", "kernels", "formats", "parallel", "model", "engine"},
    "tools": {"base", "kernels", "formats", "parallel", "model", "tools"},
    "cli": {"base", "kernels", "formats", "parallel", "model", "engine", "tools", "cli"},
}
# where a layer's headers are found by a quoted include that is not beside the includer
INCLUDE_DIRS = {
    "base": ["kernels/base/include"],
    "kernels": ["kernels/cpu", "kernels/cuda"],
    "formats": ["common/formats/include"],
    "parallel": ["common/parallel/include"],
    "model": ["common/model/include"],
    "engine": ["common/engine/include"],
    "tools": ["common/tools/include"],
    "cli": ["common/cli/include"],
}
SOURCE_EXT = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(rel_path):
    """The layer a repo-relative path belongs to, or None (the top: may include anything)."""
    for layer, folders in LAYERS.items():
        for folder in folders:
            if rel_path == folder or rel_path.startswith(folder + "/"):
                return layer
    return None


def resolve(root, including_rel, header):
    """Repo-relative paths the quoted include `header` can mean from `including_rel`."""
    beside = os.path.normpath(os.path.join(os.path.dirname(including_rel), header))
    if os.path.isfile(os.path.join(root, beside)):
        return [beside]
    found = []
    for dirs in INCLUDE_DIRS.values():
        for d in dirs:
            candidate = os.path.normpath(os.path.join(d, header))
            if os.path.isfile(os.path.join(root, candidate)):
                found.append(candidate)
    return found


def check(root, out=sys.stdout):
    """Checks every layered file under `root`; returns the exit status described above."""
    status = 0
    n_files = 0
    for folders in LAYERS.values():
        for folder in folders:
            for dirpath, _, files in os.walk(os.path.join(root, folder)):
                for name in sorted(files):
                    if not name.endswith(SOURCE_EXT):
                        continue
                    rel = os.path.relpath(os.path.join(dirpath, name), root)
                    n_files += 1
                    layer = layer_of(rel)
                    with open(os.path.join(root, rel), encoding="utf-8") as f:
                        for line_no, line in enumerate(f, 1):
                            m = INCLUDE_RE.match(line)
                            if not m:
                                continue
                            targets = resolve(root, rel, m.group(1))
                            if len(targets) != 1:
                                what = "no file" if not targets else "several files: " + ", ".join(targets)
                                print(f"{rel}:{line_no}: \"{m.group(1)}\" resolves to {what}", file=out)
                                status = max(status, 2)
                                continue
                            target_layer = layer_of(targets[0])
                            if target_layer is None:
                                print(f"{rel}:{line_no}: layer {layer} includes {targets[0]}, "
                                      "which is outside every layer", file=out)
                                status = max(status, 1)
                            elif target_layer not in ALLOWED[layer]:
                                print(f"{rel}:{line_no}: layer {layer} includes {m.group(1)} of layer "
                                      f"{target_layer} (allowed: {', '.join(sorted(ALLOWED[layer]))})",
                                      file=out)
                                status = max(status, 1)
    if status == 0:
        print(f"check_layers: {n_files} files, every include points down", file=out)
    return status


def self_test():
    """Builds a small tree with one upward include and one clean one; the check must tell them apart."""
    def write(root, rel, text):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    class Sink:
        def __init__(self):
            self.text = ""

        def write(self, s):
            self.text += s

    with tempfile.TemporaryDirectory() as root:
        write(root, "kernels/base/include/lio/error.h", "#pragma once\n")
        write(root, "common/model/include/lio/model_config.h", '#pragma once\n#include "lio/error.h"\n')
        write(root, "kernels/cpu/cpu_ops.h", '#pragma once\n#include "lio/error.h"\n')
        clean = Sink()
        if check(root, clean) != 0:
            print("self-test: a clean tree was rejected:\n" + clean.text)
            return 1
        write(root, "kernels/cpu/rope.cpp", '#include "cpu_ops.h"\n#include "lio/model_config.h"\n')
        dirty = Sink()
        if check(root, dirty) != 1 or "kernels/cpu/rope.cpp:2: layer kernels includes lio/model_config.h" not in dirty.text:
            print("self-test: the upward include kernels -> model was not reported:\n" + dirty.text)
            return 1
        write(root, "common/engine/include/lio/engine.h", '#pragma once\n#include "lio/quantize.h"\n')
        write(root, "common/tools/include/lio/quantize.h", '#pragma once\n')
        os.remove(os.path.join(root, "kernels/cpu/rope.cpp"))
        sibling = Sink()
        if check(root, sibling) != 1 or "layer engine includes lio/quantize.h of layer tools" not in sibling.text:
            print("self-test: the sideways include engine -> tools was not reported:\n" + sibling.text)
            return 1
    print("check_layers self-test: upward and sideways includes are caught, a clean tree passes")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    return check(os.path.normpath(args.root))


if __name__ == "__main__":
    sys.exit(main())
