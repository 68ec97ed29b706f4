#!/usr/bin/env python3
"""Batch-1 decode against the machine's limit, one row per weight format the course ships
(issue 44, item 5; issue 64 adds Q4_0, Q6_K, Gemma 3's F32 copy, ik_llama.cpp and the compute probe):
SmolLM2's F32, Q8_0, Q4_0, Q4_1, Q4_K_M and Q6_K, Gemma 3 270M's own Q4_K_M file and its F32 copy.

A batch-1 decode step reads every weight matrix once, so its ceiling is the memory's read
bandwidth: achieved GB/s = the bytes one step reads (the matrices, not the embedding table) x
tok/s. For each file, in interleaved rounds (COURSE.md, "Performance method"):
  - LIO, with what `lio generate` does by default (`--activations auto`: int8 activations on
    quantized weights, f32 on float ones), on 2 threads and on 1, each beside the probe on as
    many threads (a format that reads below the probe on one core too is bound by its kernel's
    instructions per byte, not by the memory);
  - llama.cpp's llama-bench on the same file and threads;
  - the read bandwidth bench_decode's probe measures in the same process.
Decode is tg64 at depth 128 (llama-bench's `-p 0 -n 64 -d 128`), as bench/cpu_decode/run.py.
Where LIO is below 85% of the probe, the report says what bounds it.

Files: models/SmolLM2-135M-Instruct.{F32,Q4_1}.gguf (scripts/setup.sh), .Q8_0, .Q4_0, .Q4_K_M and .Q6_K (made
here by llama.cpp's llama-quantize from the F32 copy when missing: bench/03_quantization/
make_kquant.sh), models/gemma-3-270m-q4_k_m.gguf (scripts/fetch_model.sh gemma3; its row is left
out, and the report says so, when the file is absent).

Writes bench/results/cpu_decode_formats.{json,md} with command, commit, machine and date.
  .venv/bin/python bench/cpu_decode/formats.py [--repeats 5] [--threads 2]
"""
import argparse
import os
import statistics
import subprocess
import sys

from liobench import ROOT, flags
from liobench.results_meta import provenance, provenance_lines, write_results

from run import (DECODE_TOKENS, DEPTH, IK_REPACK, MIN_REPEATS, add_ik_args, best_ik, ik_wanted, ratio_cell, run_ik,
                 run_lio, run_llama, spread)

FORMATS = (  # label, file, how it was made, the make_kquant.sh type that makes it (or None)
    ("F32", "models/SmolLM2-135M-Instruct.F32.gguf", "SmolLM2's Q4_1 weights dequantized (scripts/setup.sh)", None),
    ("Q8_0", "models/SmolLM2-135M-Instruct.Q8_0.gguf", "llama-quantize from the F32 copy", "Q8_0"),
    ("Q4_0", "models/SmolLM2-135M-Instruct.Q4_0.gguf", "llama-quantize from the F32 copy", "Q4_0"),
    ("Q4_1", "models/SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2 as shipped (token_embd Q8_0)", None),
    ("Q4_K_M", "models/SmolLM2-135M-Instruct.Q4_K_M.gguf", "llama-quantize from the F32 copy", "Q4_K_M"),
    ("Q6_K", "models/SmolLM2-135M-Instruct.Q6_K.gguf", "llama-quantize from the F32 copy (576-wide rows fall "
     "back to Q8_0)", "Q6_K"),
    ("Gemma 3 F32", "models/gemma-3-270m.F32.gguf", "Gemma 3 270M's Q4_K_M weights dequantized (scripts/setup.sh)",
     None),
    ("Gemma 3 Q4_K_M", "models/gemma-3-270m-q4_k_m.gguf", "Gemma 3 270M as shipped (Q5_0 / Q8_0 / Q4_K / Q6_K)",
     None),
)
NEAR = 0.85  # the line: below it, say what bounds the step


def bound_text(pct, pct1, scaling):
    """What bounds a step at `pct` of the 2-thread probe, `pct1` of the 1-thread probe on 1 thread,
    whose 2-thread speed is `scaling` x its 1-thread speed."""
    if pct >= NEAR:
        return "the memory (at the probe's level)"
    if pct1 < NEAR:
        return (f"the instructions per byte: one core alone reads {pct1:.0%} of what the probe reads on one core, "
                f"and a second core gives {scaling:.2f}x, so the cores are busy decoding and multiplying, not "
                "waiting for bytes")
    return (f"the two cores together: one core alone reaches {pct1:.0%} of its probe, two only {pct:.0%} "
            f"({scaling:.2f}x): time outside the matrices (attention, norms, the fork and join per matmul)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    flags.add_bin(ap)
    ap.add_argument("--llama-bench", default=os.path.join(ROOT, "build-llama/bin/llama-bench"))
    add_ik_args(ap)
    ap.add_argument("--repeats", type=int, default=MIN_REPEATS, help=f"interleaved rounds (COURSE.md: >= {MIN_REPEATS})")
    flags.add_threads(ap, 2)
    ap.add_argument("--formats", default=",".join(f[0] for f in FORMATS), help="comma-separated labels")
    flags.add_out(ap, "cpu_decode_formats")
    a = ap.parse_args()
    os.chdir(ROOT)
    if not os.path.exists(a.llama_bench):
        sys.exit(f"no {a.llama_bench}: run bench/batched/build_llama_tools.sh --speculative")
    ik = ik_wanted(a)
    prov = provenance()
    wanted = a.formats.split(",")
    rows, absent = [], []
    for label, path, made, kquant in FORMATS:
        if label not in wanted:
            continue
        if not os.path.exists(path) and kquant:
            subprocess.run(["bash", "bench/03_quantization/make_kquant.sh", kquant], check=True)
        if not os.path.exists(path):
            absent.append(f"{label} ({path} absent)")
            continue
        act = "f32" if label.endswith("F32") else "int8"
        one = argparse.Namespace(bin=a.bin, threads=1)
        runs = []
        for rep in range(a.repeats):
            lio = run_lio(a, path, act, DEPTH, DECODE_TOKENS)
            lio1 = run_lio(one, path, act, DEPTH, DECODE_TOKENS)
            llama = run_llama(a, path, 0, DECODE_TOKENS, DEPTH)
            runs.append({"lio_tg": lio["decode_tokens_per_s"], "lio_tg_1thread": lio1["decode_tokens_per_s"],
                         "llama_tg": llama, "read_bw_gbs": lio["read_bandwidth_gbs"],
                         "read_bw_gbs_1thread": lio1["read_bandwidth_gbs"], "decode_bytes": lio["weight_bytes"],
                         "compute_peak": {k: lio.get(k) for k in ("compute_peak_isa", "compute_peak_f32_gflops",
                                                                  "compute_peak_int8_gops")}})
            if ik:
                runs[-1]["ik"] = {str(rtr): {"tg": run_ik(a, path, 0, DECODE_TOKENS, DEPTH, rtr)} for rtr in IK_REPACK}
            print(f"{label} round {rep + 1}/{a.repeats}: LIO {runs[-1]['lio_tg']:.1f} tok/s (1 thread "
                  f"{runs[-1]['lio_tg_1thread']:.1f}), llama.cpp {llama:.1f}"
                  + "".join(f", ik -rtr {k} {v['tg']:.1f}" for k, v in runs[-1].get("ik", {}).items())
                  + f", probe {runs[-1]['read_bw_gbs']:.1f} GB/s", flush=True)
        mb = runs[0]["decode_bytes"]
        tg = [r["lio_tg"] for r in runs]
        tg1 = [r["lio_tg_1thread"] for r in runs]
        ltg = [r["llama_tg"] for r in runs]
        bw = statistics.median(r["read_bw_gbs"] for r in runs)
        bw1 = statistics.median(r["read_bw_gbs_1thread"] for r in runs)
        _, ratio = ratio_cell(list(zip(tg, ltg)))
        gbs, lgbs = mb * statistics.median(tg) / 1e9, mb * statistics.median(ltg) / 1e9
        scaling = statistics.median(tg) / statistics.median(tg1)
        gbs1 = mb * statistics.median(tg1) / 1e9
        ik_row = {}
        if ik:
            rtr, ik_tg = best_ik(runs, "tg")
            _, ik_ratio = ratio_cell(list(zip(tg, ik_tg)))
            ik_row = {"ik_tg": spread(ik_tg), "ik_rtr": rtr, "tg_ratio_ik": ik_ratio,
                      "ik_gbs": mb * statistics.median(ik_tg) / 1e9}
        rows.append({**ik_row, "format": label, "file": path, "made": made, "activations": act, "decode_bytes": mb,
                     "lio_tg": spread(tg), "lio_tg_1thread": spread(tg1), "llama_tg": spread(ltg), "tg_ratio": ratio,
                     "read_bw_gbs": bw, "lio_gbs": gbs, "llama_gbs": lgbs, "lio_pct": gbs / bw, "llama_pct": lgbs / bw,
                     "read_bw_gbs_1thread": bw1, "lio_gbs_1thread": gbs1, "lio_pct_1thread": gbs1 / bw1,
                     "thread_scaling": scaling, "bound": bound_text(gbs / bw, gbs1 / bw1, scaling), "runs": runs})
    below = a.repeats < MIN_REPEATS
    lines = ["# Batch-1 decode against the machine's read bandwidth, by weight format", ""]
    lines += provenance_lines(prov)
    peaks = [r["runs"][0].get("compute_peak") or {} for r in rows]
    if peaks and peaks[0].get("compute_peak_isa"):
        f32s = [r["compute_peak"]["compute_peak_f32_gflops"] for row in rows for r in row["runs"]]
        i8s = [r["compute_peak"]["compute_peak_int8_gops"] for row in rows for r in row["runs"]]
        lines += [f"- Compute peak (bench_decode's probe, every LIO run, {a.threads} threads, "
                  f"{peaks[0]['compute_peak_isa']}): f32 {statistics.median(f32s):.0f} GFLOP/s, int8 "
                  f"{statistics.median(i8s):.0f} GOP/s (medians); a batch-1 decode step does 2 ops per weight, so "
                  "at these rates its matrices would take a small fraction of the time the bytes take"]
    lines += [f"- Decode: tg{DECODE_TOKENS} at depth {DEPTH}, {a.threads} threads both engines; LIO with `lio generate`'s "
              "default activations (int8 on quantized weights, f32 on F32), also on 1 thread; llama.cpp: llama-bench "
              f"`-p 0 -n {DECODE_TOKENS} -d {DEPTH} -r 1`",
              f"- {a.repeats} interleaved rounds per file; cells are medians, ratios median [min–max] of the per-round "
              "ratios, \"tie\" when that range holds 1" + (f". **Below the rule**: fewer than {MIN_REPEATS}." if below else ""),
              "- GB/s: the bytes one decode step reads (the matrices, not the embedding table) x tok/s; probe: "
              "bench_decode's read bandwidth in the same process (median)",
              f"- Bound: below {NEAR:.0%} of the probe, the 1-thread run against the 1-thread probe says what bounds "
              "the step", ""]
    if ik:
        lines += ["- ik_llama.cpp: its llama-bench (`bench/batched/build_llama_tools.sh --ik`) `-p 0 -n 0 -gp "
                  f"{DEPTH},{DECODE_TOKENS}` (no `-d` there; `-gp` times the {DECODE_TOKENS} tokens after a {DEPTH}-token "
                  "prompt) with `-rtr 0` and `-rtr 1` each round; its cell is the better setting by median", ""]
    lines += ["| format | decode MB | LIO tok/s | llama.cpp tok/s | LIO / llama.cpp | "
              + ("ik_llama.cpp tok/s | LIO / ik | " if ik else "") + "probe GB/s | LIO GB/s (% of probe) "
              "| llama.cpp GB/s (%) | " + ("ik GB/s (%) | " if ik else "")
              + "LIO 1 thread GB/s (% of 1-thread probe) | LIO 2 / 1 threads | what bounds LIO |",
              "|---|---:|---:|---:|---:|" + ("---:|---:|" if ik else "") + "---:|---:|---:|" + ("---:|" if ik else "")
              + "---:|---:|---|"]

    def ratio_text(ratio):
        m, lo, hi = ratio
        rc = f"{m:.2f} [{lo:.2f}–{hi:.2f}]"
        return f"tie ({rc})" if lo <= 1 <= hi else rc

    for r in rows:
        ik_cells = (f"{r['ik_tg'][0]:.1f} (rtr {r['ik_rtr']}) | {ratio_text(r['tg_ratio_ik'])} | " if ik else "")
        ik_gbs = f"{r['ik_gbs']:.1f} ({r['ik_gbs'] / r['read_bw_gbs']:.0%}) | " if ik else ""
        lines.append(f"| {r['format']} | {r['decode_bytes'] / 1e6:.1f} | {r['lio_tg'][0]:.1f} | {r['llama_tg'][0]:.1f} | "
                     f"{ratio_text(r['tg_ratio'])} | {ik_cells}{r['read_bw_gbs']:.1f} | {r['lio_gbs']:.1f} "
                     f"({r['lio_pct']:.0%}) | {r['llama_gbs']:.1f} ({r['llama_pct']:.0%}) | {ik_gbs}{r['lio_gbs_1thread']:.1f} "
                     f"({r['lio_pct_1thread']:.0%}) | {r['thread_scaling']:.2f}x | "
                     f"{r['bound']} |")
    for x in absent:
        lines.append(f"\nNot measured: {x}.")
    out = {"provenance": prov, "threads": a.threads, "depth": DEPTH, "decode_tokens": DECODE_TOKENS,
           "repeats": a.repeats, "near": NEAR, "rows": rows, "absent": absent}
    if below:
        out["provenance"]["below_rule"] = f"--repeats {a.repeats} < {MIN_REPEATS}"
    write_results(a.out, out, lambda _: "\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {a.out}.json and .md")


if __name__ == "__main__":
    main()
