#!/usr/bin/env python3
"""Chapter 03's formats, LIO against llama.cpp on the same GGUF files, in one run.

1. `ch03_quantization --variants V --out-dir DIR --json` makes each variant's file from the F32
   reference (or uses the reference) and measures LIO: decode tok/s at batch 1 and 32 (context
   256) and prefill tok/s of a 256-token prompt, medians of --steps.
2. For every file, `llama-batched-bench -npp 256 -ntg 16 -npl 1,32` (built from the llama.cpp
   vendored in llama-cpp-python by bench/batched/build_llama_tools.sh): S_TG at 1 and 32
   sequences is its decode tok/s, S_PP at 1 its prefill tok/s; median of --repeats runs.
3-bit variants are made with --llama-blocks (Q4_0 / Q4_1 containers), the only 3-bit files
llama.cpp can read.
Variants that differ only in how LIO runs a file (+a8b, +a8, +kv8) share the file, so
llama.cpp's columns repeat. llama.cpp's CPU kernels round activations to 8 bits per 32-element
block for Q8_0 / Q4_0 / Q4_1 weights (ggml's vec_dot_type q8_0 / q8_1): LIO's "+a8b" rows are
the like-for-like ones.

Writes bench/results/03_quantization_peer_cpu.{json,md}.
Usage: .venv/bin/python bench/03_quantization/peer_speed.py [--variants ...] [--files A.gguf,...]
       [--steps 15] [--repeats 3] [--out PREFIX]
Needs build/bin/ch03_quantization (Release) and build-llama/bin/llama-batched-bench.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "batched"))
from run import machine_info, run_llama  # noqa: E402

DEFAULT_OUT = os.path.join(ROOT, "bench/results/03_quantization_peer_cpu")
DEFAULT_VARIANTS = "f32,q8_0,q8_0+a8b,w8a16,w8a8,q8_0+kv8,q4_1,q4_1+a8b,q4_0,q4_0+a8b"


def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default=DEFAULT_VARIANTS)
    ap.add_argument("--files", default="", help="comma-separated GGUF files to run as they are too "
                    "(e.g. llama.cpp's Q4_K_M from bench/03_quantization/make_kquant.sh)")
    ap.add_argument("--steps", type=int, default=15, help="LIO: timed decode steps / prefills (median)")
    ap.add_argument("--repeats", type=int, default=3, help="llama.cpp: runs per file (median)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--ch03", default=os.path.join(ROOT, "build/bin/ch03_quantization"))
    ap.add_argument("--llama-bench", default=os.path.join(ROOT, "build-llama/bin/llama-batched-bench"))
    ap.add_argument("--out", default=DEFAULT_OUT, help="output prefix: writes PREFIX.json and PREFIX.md")
    a = ap.parse_args()
    for tool in (a.ch03, a.llama_bench):
        if not os.access(tool, os.X_OK):
            sys.exit(f"{tool} is missing: build it first (see this script's docstring)")

    with tempfile.TemporaryDirectory(prefix="lio_ch03_peer_") as tmp:
        cmd = [a.ch03, "--variants", a.variants, "--out-dir", tmp, "--steps", str(a.steps), "--threads",
               str(a.threads), "--ppl-chunks", "1", "--eval-tokens", "64", "--json",
               "--llama-blocks"]  # 3-bit variants in Q4 blocks: llama.cpp cannot read LIO's Q3_0 / Q3_1
        if a.files:
            cmd += ["--files", a.files]
        print("LIO:", " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd), flush=True)
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            sys.exit(f"ch03_quantization failed ({r.returncode}):\n{r.stderr[-3000:]}")
        lio = json.loads(r.stdout)
        ns = types.SimpleNamespace(llama_bench=a.llama_bench, prompt_tokens=256, gen_tokens=16, threads=a.threads)
        llama, llama_cmd = {}, ""
        for v in lio["variants"]:
            f = v["file"]
            if f in llama:
                continue
            runs = []
            for _ in range(a.repeats):
                rows, llama_cmd = run_llama(ns, f, [1, 32])
                runs.append(rows)
            llama[f] = {"decode_b1": statistics.median(x[1]["S_TG t/s"] for x in runs),
                        "decode_b32": statistics.median(x[32]["S_TG t/s"] for x in runs),
                        "prefill": statistics.median(x[1]["S_PP t/s"] for x in runs)}
            print(f'llama.cpp {v["variant"]}: {llama[f]}', flush=True)

    rows = []
    for v in lio["variants"]:
        p = llama[v["file"]]
        rows.append({"variant": v["variant"], "grid": v["grid"], "weight_mib": v["weight_bytes"] / 2**20,
                     "lio": {"decode_b1": v["decode_tokens_per_s_b1"], "decode_b32": v["decode_tokens_per_s_b32"],
                             "prefill": v["prefill_tokens_per_s"]},
                     "llama_cpp": p})
    m = machine_info()
    out = {"machine": m, "lio_device": lio["device"], "threads": a.threads, "steps": a.steps, "repeats": a.repeats,
           "llama_cmd": llama_cmd, "rows": rows}
    with open(a.out + ".json", "w") as f:
        json.dump(out, f, indent=2)
    lines = [
        "# Chapter 03: LIO and llama.cpp on the same files (CPU)",
        "",
        f'Machine: {m["cpu"]}, {m["cpus"]} CPUs; {a.threads} threads for both engines. Model: SmolLM2-135M-Instruct, '
        "variants made by `lio quantize` from the F32 reference (embedding kept at Q8_0)"
        + (", and the --files as they are." if a.files else "."),
        "Command: `.venv/bin/python bench/03_quantization/peer_speed.py "
        + (f"--variants {a.variants} " if a.variants != DEFAULT_VARIANTS else "")
        + (f"--files {','.join(os.path.relpath(f, ROOT) for f in a.files.split(','))} " if a.files else "")
        + f"--steps {a.steps} --repeats {a.repeats} --ch03 {os.path.relpath(a.ch03, ROOT)}"
        + (f" --out {os.path.relpath(a.out, ROOT)}" if a.out != DEFAULT_OUT else "") + "`.",
        f"LIO: ch03_quantization, median of {a.steps} steps (decode at context 256; prefill of 256 tokens). "
        f"llama.cpp: `{llama_cmd}`, median of {a.repeats} runs (S_TG at 1 and 32 sequences, S_PP at 1).",
        "",
        "| variant | grid | weight MiB | decode b1 LIO / llama.cpp | ratio | decode b32 LIO / llama.cpp | ratio "
        "| prefill LIO / llama.cpp | ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lo, ll = r["lio"], r["llama_cpp"]
        lines.append(
            f'| {r["variant"]} | {r["grid"]} | {r["weight_mib"]:.1f} | {lo["decode_b1"]:.1f} / {ll["decode_b1"]:.1f} '
            f'| {ratio(lo["decode_b1"], ll["decode_b1"])} | {lo["decode_b32"]:.1f} / {ll["decode_b32"]:.1f} '
            f'| {ratio(lo["decode_b32"], ll["decode_b32"])} | {lo["prefill"]:.1f} / {ll["prefill"]:.1f} '
            f'| {ratio(lo["prefill"], ll["prefill"])} |')
    lines += ["", "Ratios above 1 mean LIO is faster. Rows that share a file share llama.cpp's numbers."]
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
