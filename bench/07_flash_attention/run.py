#!/usr/bin/env python3
"""Chapter 07's kernel benchmark: the naive twin (S materialized) against the tiled kernel
(online softmax, split-KV decode) on the CPU, same shapes, same threads, same run (COURSE.md,
"Performance method").

    .venv/bin/python bench/07_flash_attention/run.py [--n 16,64,256,512,1024,2048,4096,8192] [--repeats 5]
        [--threads T] [--device cpu]

One `build/bin/ch07_flash_attention kernels --json` process times, at SmolLM2-135M's shape (9
query heads, 3 KV heads, head_dim 64):
- prefill: causal attention of N queries over N keys, naive vs flash, median and min-max over
  --repeats, the peak scratch each kernel allocated, Task 1's prediction of S's bytes (f32) and
  the largest |naive - flash| difference;
- decode: one query row over a context of N keys (batch 1), naive vs flash with split-KV
  (Flash-Decoding) vs flash walking its splits on one thread.
This script adds what the program does not measure itself: the FLOPs of each shape (4 d per
(query, visible key) per head: q.k and p.v), the achieved GFLOP/s, the K/V bytes a decode step
reads and the achieved GB/s, next to a copy bandwidth measured here (numpy, one thread: a
reference, not the machine's peak).

Writes bench/results/07_flash_attention_cpu.{json,md,png}: the JSON is the program's object plus
"provenance" (command, commit, machine, date; bench/liobench/results_meta.py) and "derived";
the lesson (docs/07_flash_attention.md) and the README render their tables from it. Nothing here
is a test; learners run it to reproduce the chapter's tables on their machine.
"""
import argparse
import json
import os
import subprocess
import sys
import time

from liobench import ROOT, flags
from liobench.results_meta import local_path_free, provenance, provenance_lines


BIN = os.path.join(ROOT, "build", "bin", "ch07_flash_attention")
DEFAULT_N = "16,64,256,512,1024,2048,4096,8192"
TIMING = ("median", "min", "max")
PREFILL_KEYS = ("n", "naive_ms", "flash_ms", "speedup", "naive_scratch_bytes", "flash_scratch_bytes", "score_bytes",
                "max_abs_diff")
DECODE_KEYS = ("context", "batch", "naive_ms", "split_ms", "nosplit_ms", "split_speedup", "naive_scratch_bytes",
               "flash_scratch_bytes")


def check_schema(obj):
    """Stops with a clear message when the program's JSON lacks a field the lesson renders."""
    def need(d, keys, where):
        missing = [k for k in keys if k not in d]
        if missing:
            sys.exit(f"run.py: {where} lacks {', '.join(missing)} (has {', '.join(d)}); "
                     "is build/bin/ch07_flash_attention current?")

    need(obj, ("device", "threads", "shape", "prefill", "decode"), "the program's JSON")
    need(obj["shape"], ("n_heads", "n_kv_heads", "head_dim"), "shape")
    for r in obj["prefill"]:
        need(r, PREFILL_KEYS, f"prefill row {r.get('n')}")
        for k in ("naive_ms", "flash_ms"):
            need(r[k], TIMING, f"prefill row {r['n']} {k}")
    for r in obj["decode"]:
        need(r, DECODE_KEYS, f"decode row {r.get('context')}")
        for k in ("naive_ms", "split_ms", "nosplit_ms"):
            need(r[k], TIMING, f"decode row {r['context']} {k}")


def copy_bandwidth_gb_s(n_bytes=256 * 2**20, repeats=5):
    """Bytes read + written per second by numpy's copy of an n_bytes array, best of `repeats`
    (one thread): a bandwidth reference measured in the same run, not the machine's peak."""
    import numpy as np

    src = np.ones(n_bytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * n_bytes / best / 1e9


def derive(obj, kv_bytes_per_element):
    """FLOPs, GFLOP/s, K/V bytes and GB/s per row, from the shapes and the medians."""
    s = obj["shape"]
    per_key = 4 * s["head_dim"] * s["n_heads"]  # q.k (2 d) and p.v (2 d) FLOPs per visible key, per head
    prefill = []
    for r in obj["prefill"]:
        n = r["n"]
        flops = per_key * n * (n + 1) // 2  # causal: query p sees keys 0..p
        prefill.append({"n": n, "flops": flops,
                        "naive_gflop_s": flops / (r["naive_ms"]["median"] * 1e6),
                        "flash_gflop_s": flops / (r["flash_ms"]["median"] * 1e6),
                        "flash_over_naive_scratch": r["flash_scratch_bytes"] / r["naive_scratch_bytes"]
                        if r["naive_scratch_bytes"] else None})
    decode = []
    for r in obj["decode"]:
        c = r["context"]
        kv_bytes = 2 * c * s["n_kv_heads"] * s["head_dim"] * kv_bytes_per_element * r["batch"]
        decode.append({"context": c, "flops": per_key * c * r["batch"], "kv_bytes": kv_bytes,
                       **{f"{k}_gb_s": kv_bytes / (r[f"{k}_ms"]["median"] * 1e6) for k in ("naive", "split", "nosplit")}})
    return {"flops_per_visible_key": per_key, "kv_bytes_per_element": kv_bytes_per_element,
            "prefill": prefill, "decode": decode}


def ms(t, digits=2):
    return f"{t['median']:.{digits}f} ({t['min']:.{digits}f}-{t['max']:.{digits}f})"


def mib(n):
    return f"{n / 2**20:,.1f} MiB"


def markdown(result):
    s, d = result["shape"], result["derived"]
    lines = ["# Chapter 07: FlashAttention kernels on the CPU", ""] + provenance_lines(result["provenance"]) + [
        "", f"{result['device']}, {result['threads']} threads; {s['n_heads']} query heads, {s['n_kv_heads']} KV heads, "
            f"head_dim {s['head_dim']} (SmolLM2-135M); median (min-max) over {result['repeats']} repeats. "
            f"Copy bandwidth measured here (numpy, one thread): {d['copy_bandwidth_gb_s']:.1f} GB/s.", "",
        "## Prefill: causal attention of N queries over N keys", "",
        "| N | naive ms | flash ms | speedup | naive GFLOP/s | flash GFLOP/s | S (Task 1, f32) | naive scratch | "
        "flash scratch | max abs diff |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r, x in zip(result["prefill"], d["prefill"]):
        lines.append(f"| {r['n']} | {ms(r['naive_ms'])} | {ms(r['flash_ms'])} | {r['speedup']:.2f}x | "
                     f"{x['naive_gflop_s']:.1f} | {x['flash_gflop_s']:.1f} | {mib(r['score_bytes'])} | "
                     f"{mib(r['naive_scratch_bytes'])} | {mib(r['flash_scratch_bytes'])} | {r['max_abs_diff']:.2e} |")
    lines += ["", "## Decode: one query row over N cached keys (batch 1)", "",
              f"K/V read per step: 2 x context x {s['n_kv_heads']} x {s['head_dim']} x "
              f"{d['kv_bytes_per_element']} bytes.", "",
              "| context | naive ms | flash, split-KV ms | flash, no split ms | split speedup | split GB/s | "
              "naive scratch | flash scratch |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r, x in zip(result["decode"], d["decode"]):
        lines.append(f"| {r['context']} | {ms(r['naive_ms'], 3)} | {ms(r['split_ms'], 3)} | {ms(r['nosplit_ms'], 3)} | "
                     f"{r['split_speedup']:.2f}x | {x['split_gb_s']:.2f} | {mib(r['naive_scratch_bytes'])} | "
                     f"{mib(r['flash_scratch_bytes'])} |")
    return "\n".join(lines) + "\n"


def plot(result, json_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from liobench.plot_util import save_beside

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    p = result["prefill"]
    ns = [r["n"] for r in p]
    ax = axes[0]
    ax.loglog(ns, [r["naive_scratch_bytes"] for r in p], "o-", label="naive: scratch allocated")
    ax.loglog(ns, [r["flash_scratch_bytes"] for r in p], "s-", label="flash: scratch allocated")
    ax.loglog(ns, [r["score_bytes"] for r in p], "k:", lw=1,
              label=f"S = {result['shape']['n_heads']} N^2 x 4 bytes (Task 1)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (queries = keys, causal prefill)")
    ax.set_ylabel("peak attention scratch (bytes)")
    ax.set_title("O(N^2) vs O(N) memory", fontsize=10)
    ax.legend(fontsize=8)
    ax = axes[1]
    for key, label, fmt in (("naive_ms", "naive, prefill", "o-"), ("flash_ms", "flash, prefill", "s-")):
        t = [r[key] for r in p]
        ax.errorbar(ns, [x["median"] for x in t], yerr=[[x["median"] - x["min"] for x in t],
                                                        [x["max"] - x["median"] for x in t]],
                    fmt=fmt, capsize=2, label=label)
    dec = result["decode"]
    cs = [r["context"] for r in dec]
    for key, label, fmt in (("naive_ms", "naive, decode", "o--"), ("split_ms", "flash split-KV, decode", "s--"),
                            ("nosplit_ms", "flash no split, decode", "^--")):
        ax.plot(cs, [r[key]["median"] for r in dec], fmt, lw=1, ms=4, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("N (prefill tokens) or context (decode, batch 1)")
    ax.set_ylabel("ms per call (median, min-max)")
    ax.set_title(f"{result['device']}, {result['threads']} threads", fontsize=10)
    ax.legend(fontsize=7)
    save_beside(fig, json_path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default=DEFAULT_N, help="comma-separated N: prefill lengths and decode contexts")
    flags.add_repeats(ap, 5)
    flags.add_threads(ap)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--kv-bytes-per-element", type=int, default=4,
                    help="bytes of one K/V element in the program's pool (f32: 4), for the decode GB/s")
    ap.add_argument("--bin", default=BIN, help="the chapter program")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", f"07_flash_attention_{{device}}"),
                    help="output path without extension ({device} is replaced)")
    ap.add_argument("--dry-run", action="store_true", help="print the command and exit")
    args = ap.parse_args()
    ns = [int(x) for x in args.n.split(",") if x.strip()]
    if not ns or min(ns) < 1:
        sys.exit("run.py: --n needs positive integers")
    if args.repeats < 1:
        sys.exit("run.py: --repeats must be >= 1")
    out = args.out.format(device=args.device)
    # --threads is an option of the program, not of its `kernels` subcommand: it goes first.
    cmd = [args.bin, "--threads", str(args.threads), "kernels", "--device", args.device, "--n",
           ",".join(map(str, ns)), "--repeats", str(args.repeats), "--json"]
    print("+ " + local_path_free(" ".join(cmd)), file=sys.stderr)
    if args.dry_run:
        return
    if not os.path.exists(args.bin):
        sys.exit(f"run.py: {os.path.relpath(args.bin, ROOT)} is missing (cmake --build build --target ch07_flash_attention)")
    r = subprocess.run(cmd, text=True, stdout=subprocess.PIPE)
    if r.returncode != 0:
        sys.exit(f"run.py: ch07_flash_attention exited {r.returncode}")
    obj = json.loads(r.stdout)
    check_schema(obj)
    result = {"provenance": provenance(command="bench/07_flash_attention/run.py " + " ".join(sys.argv[1:])),
              "repeats": args.repeats}
    result.update(obj)
    result["derived"] = derive(obj, args.kv_bytes_per_element)
    result["derived"]["copy_bandwidth_gb_s"] = copy_bandwidth_gb_s()
    text = local_path_free(json.dumps(result, indent=1))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out + ".json", "w") as f:
        f.write(text + "\n")
    result = json.loads(text)
    with open(out + ".md", "w") as f:
        f.write(markdown(result))
    plot(result, out + ".json")
    print(f"wrote {os.path.relpath(out, ROOT)}.json, .md, .png", file=sys.stderr)


if __name__ == "__main__":
    main()
