#!/usr/bin/env python3
"""Chapter 03's formats: LIO against llama.cpp on the same GGUF files, timed by one harness.

The harness. Both engines run as whole processes on the same file, the same thread count and
the same shape of work, and this script times each process with the same clock
(time.perf_counter around subprocess.run):
    LIO        build/bin/lio batch: B requests of P prompt tokens, G tokens each (greedy, EOS
               ignored, no prefix cache), --max-num-batched-tokens B x P so every prompt is
               prefilled in one step before any decode, as llama-batched-bench does
    llama.cpp  build-llama/bin/llama-batched-bench -npp P -ntg G -npl B (built by
               bench/batched/build_llama_tools.sh from the llama.cpp vendored in llama-cpp-python)
A process's wall time also holds loading the model, warm-up and start-up, which differ between
the engines and have nothing to do with the kernels. They cancel in a difference of two runs
that differ only in the work measured:
    decode b1   N / (T(P, 1 + N, B=1) - T(P, 1, B=1))             tokens/s of one sequence
    decode b32  32 N' / (T(P, 1 + N', B=32) - T(P, 1, B=32))     tokens/s over 32 sequences
    prefill     Q / (T(P + Q, 1, B=1) - T(P, 1, B=1))            prompt tokens/s (positions P..P+Q)
N' is 64 because both batch-32 runs first prefill 32 x P = 8,192 tokens (15-20 s on 2 cores), and
that prefill's run-to-run jitter is seconds: with N' = 16 (512 decode tokens, under 2 s) llama.cpp's
f32 difference ranged 0.30-2.76 s over 5 repeats on a 2-core AMD EPYC (2026-11-28) and one q8_0
difference came out negative (-0.88 s), which stops the run; 64 steps put about 4x the work above
the same jitter. Q is 2,048, not P, for the same reason: with Q = 256 (under 0.8 s of work) LIO's f32
prefill ranged 330-1,361 tok/s over 4 repeats on the same machine (2026-11-28) and the fifth difference
came out negative (-0.044 s). With Q = 2,048 the same machine's medians were 394-623 tok/s (LIO) and
199-414 tok/s (llama.cpp) over the ten default variants: 3-10 s of work, and LIO's f32 repeats spanned
415-440 tok/s. The prefill row is therefore at a mean context of P + Q/2 = 1,280, where attention is
about 30% of a token's FLOPs, not llama-bench's pp512 from an empty cache. (LIO's first token comes
from the prefill and llama-batched-bench decodes G steps after it, so both differences hold exactly
N decode steps; the G = 1 runs cancel.) Why not each
engine's own report: ch03_quantization times single steps inside LIO and llama-batched-bench times
its own phases, two timers with two definitions; this way one definition and one clock serve both.
What still differs: LIO samples (greedy) and writes result lines for every token, which
llama-batched-bench does not do, so the harness charges LIO slightly more. LIO's KV cache is
f16, as llama.cpp's default, except in +kv8 (int8) rows; llama.cpp runs every file with its
default f16 cache, so those rows compare different caches and say so.

Repeats and ties. Each measurement runs LIO, then llama.cpp, then LIO, ... (A B A B), --repeats
times (default 5), so drift on a shared machine hits both. Each repeat gives one ratio
LIO / llama.cpp from its adjacent pair; the report gives each engine's median and min-max, and
the ratios' median and min-max. When the ratios' range holds 1, the row says "tie": the engines
are not told apart by this run.

Variant files come from `ch03_quantization --variants V --out-dir DIR --skip-speed` (3-bit grids
with --llama-blocks, the only 3-bit files llama.cpp reads), or --files as they are. Suffixes
change how LIO runs a file (ch03's names): +a8b `--activations int8` (per 32-block, llama.cpp's
CPU rule: the like-for-like rows), +a8 and w8a8 `--activations int8-token`, +kv8 / +kv16 the KV
cache in int8 / f16; llama.cpp's columns repeat for variants that share a file.

Writes PREFIX.json and PREFIX.md (default bench/results/03_quantization_peer_cpu), with the
command, commit, machine and date, and no local paths.
Usage: python3 bench/03_quantization/peer_speed.py [--variants ...] [--files A.gguf,...]
       [--repeats 5] [--prompt-tokens 256] [--gen-tokens 64] [--gen-tokens-b32 64] [--prefill-tokens 2048]
       [--out PREFIX]
Needs build/bin/lio and build/bin/ch03_quantization (Release) and build-llama/bin/llama-batched-bench.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from liobench import ROOT, flags
from liobench.results_meta import local_path_free, provenance, provenance_lines

DEFAULT_OUT = os.path.join(ROOT, "bench/results/03_quantization_peer_cpu")
DEFAULT_VARIANTS = "f32,q8_0,q8_0+a8b,w8a16,w8a8,q8_0+kv8,q4_1,q4_1+a8b,q4_0,q4_0+a8b"
METRICS = ("decode_b1", "decode_b32", "prefill")


# ---------------------------------------------------------------------------------------------
# The two engines, as processes of the same shape

def lio_cmd(a, model, prompts, n_prompt, gen, batch, activations, kv):
    return [a.lio, "batch", "--model", model, "--prompts", prompts, "--out", os.devnull, "--max-tokens", str(gen),
            "--ignore-eos", "--temperature", "0", "--max-num-seqs", str(batch),
            "--max-num-batched-tokens", str(max(512, batch * n_prompt)), "--prefix-cache", "none",
            "--threads", str(a.threads), "--activations", activations, "--kv-cache-dtype", kv]


def llama_cmd(a, model, n_prompt, gen, batch):
    return [a.llama_bench, "-m", model, "-c", str(batch * (n_prompt + gen) + 64), "-b", "2048", "-ub", "512",
            "-npp", str(n_prompt), "-ntg", str(gen), "-npl", str(batch), "-t", str(a.threads), "-tb", str(a.threads)]


def wall_s(cmd):
    """Seconds the process took, start to exit (the one clock for both engines)."""
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-3000:]}")
    return dt


def write_prompts(path, n_requests, n_tokens):
    """JSONL of n_requests distinct prompts of exactly n_tokens ids (speed does not depend on them)."""
    with open(path, "w") as f:
        for r in range(n_requests):
            f.write(json.dumps({"prompt_token_ids": [100 + (r * 131 + i * 7919) % 40000 for i in range(n_tokens)]})
                    + "\n")


def measure(a, model, run, prompts):
    """One repeat of every metric for both engines, interleaved A B A B; returns
    {metric: (lio tok/s, llama tok/s)}."""
    p, n1, n32, q = a.prompt_tokens, a.gen_tokens, a.gen_tokens_b32, a.prefill_tokens
    # (run name, (n_prompt, gen, batch)): the short and long run of each difference.
    shapes = {"b1_short": (p, 1, 1), "b1_long": (p, 1 + n1, 1), "pf_long": (p + q, 1, 1),
              "b32_short": (p, 1, 32), "b32_long": (p, 1 + n32, 32)}
    t = {"lio": {}, "llama": {}}
    for name, (n_prompt, gen, batch) in shapes.items():
        t["lio"][name] = wall_s(lio_cmd(a, model, prompts[(n_prompt, batch)], n_prompt, gen, batch, *run))
        t["llama"][name] = wall_s(llama_cmd(a, model, n_prompt, gen, batch))

    def rate(engine, tokens, long, short):
        dt = t[engine][long] - t[engine][short]
        if dt <= 0:
            sys.exit(f"{engine}: {long} took no longer than {short} ({dt:.3f} s): the measured work is lost in "
                     "start-up noise; raise --gen-tokens / --gen-tokens-b32 / --prompt-tokens")
        return tokens / dt

    return {m: tuple(rate(e, *spec) for e in ("lio", "llama")) for m, spec in (
        ("decode_b1", (n1, "b1_long", "b1_short")), ("decode_b32", (32 * n32, "b32_long", "b32_short")),
        ("prefill", (q, "pf_long", "b1_short")))}


# ---------------------------------------------------------------------------------------------
# Summaries: medians, spreads, ties

def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def compare(pairs):
    """pairs: [(lio, llama)] of one metric, one per repeat (adjacent runs)."""
    ratios = [lo / ll for lo, ll in pairs]
    r = summary(ratios)
    r["tie"] = r["min"] <= 1.0 <= r["max"]
    return {"lio": summary([lo for lo, _ in pairs]), "llama_cpp": summary([ll for _, ll in pairs]), "ratio": r}


def fmt_engine(s):
    return f'{s["median"]:.1f} [{s["min"]:.1f}–{s["max"]:.1f}]'


def fmt_ratio(r):
    text = f'{r["median"]:.2f}x [{r["min"]:.2f}–{r["max"]:.2f}]'
    return f"tie ({text})" if r["tie"] else text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default=DEFAULT_VARIANTS)
    ap.add_argument("--files", default="", help="comma-separated GGUF files to run as they are too "
                    "(e.g. llama.cpp's Q4_K_M from bench/03_quantization/make_kquant.sh); FILE+a8b applies a suffix")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved A B pairs per measurement (>= 5)")
    ap.add_argument("--prompt-tokens", type=int, default=256, help="P: decode runs at context P; prefill times P..P+Q")
    ap.add_argument("--gen-tokens", type=int, default=64, help="N: decode steps timed at batch 1")
    ap.add_argument("--gen-tokens-b32", type=int, default=64, help="N': decode steps timed at batch 32")
    ap.add_argument("--prefill-tokens", type=int, default=2048, help="Q: prompt tokens timed in prefill")
    flags.add_threads(ap)
    flags.add_lio(ap)
    ap.add_argument("--ch03", default=os.path.join(ROOT, "build/bin/ch03_quantization"))
    ap.add_argument("--llama-bench", default=os.path.join(ROOT, "build-llama/bin/llama-batched-bench"))
    ap.add_argument("--out", default=DEFAULT_OUT, help="output prefix: writes PREFIX.json and PREFIX.md")
    a = ap.parse_args()
    if a.repeats < 5:
        print(f"warning: --repeats {a.repeats}: COURSE.md asks for at least 5 to call a ratio", file=sys.stderr)
    for tool in (a.lio, a.ch03, a.llama_bench):
        if not os.access(tool, os.X_OK):
            sys.exit(f"{tool} is missing: build it first (see this script's docstring)")
    prov = provenance()

    with tempfile.TemporaryDirectory(prefix="lio_ch03_peer_") as tmp:
        # 1. The files (and how LIO runs each variant), from ch03_quantization; no timing there.
        cmd = [a.ch03, "--variants", a.variants, "--out-dir", tmp, "--skip-speed", "--threads", str(a.threads),
               "--ppl-chunks", "1", "--eval-tokens", "64", "--json", "--llama-blocks"]
        if a.files:
            cmd += ["--files", a.files]
        print("files:", local_path_free(" ".join(cmd)), flush=True)
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            sys.exit(f"ch03_quantization failed ({r.returncode}):\n{r.stderr[-3000:]}")
        variants = json.loads(r.stdout)["variants"]
        prompts = {}
        for n_prompt, batch in ((a.prompt_tokens, 1), (a.prompt_tokens + a.prefill_tokens, 1), (a.prompt_tokens, 32)):
            prompts[(n_prompt, batch)] = os.path.join(tmp, f"prompts_{n_prompt}x{batch}.jsonl")
            write_prompts(prompts[(n_prompt, batch)], batch, n_prompt)

        # 2. Every variant, every repeat, both engines interleaved.
        rows = []
        for v in variants:
            kv = v.get("kv_cache_dtype", "f32")
            run = (v.get("activations", "f32"), "f16" if kv == "f32" else kv)
            pairs = {m: [] for m in METRICS}
            for rep in range(a.repeats):
                got = measure(a, v["file"], run, prompts)
                for m in METRICS:
                    pairs[m].append(got[m])
                print(f'{v["variant"]} repeat {rep + 1}: ' + ", ".join(
                    f"{m} {got[m][0]:.1f} / {got[m][1]:.1f}" for m in METRICS), flush=True)
            row = {"variant": v["variant"], "grid": v["grid"], "file": os.path.basename(v["file"]),
                   "weight_mib": v["weight_bytes"] / 2**20, "lio_activations": run[0], "lio_kv_cache": run[1],
                   "llama_kv_cache": "f16"}
            row.update({m: compare(pairs[m]) for m in METRICS})
            row["decode_b1"]["lio"]["weight_gbs"] = v["weight_bytes"] * row["decode_b1"]["lio"]["median"] / 1e9
            row["decode_b1"]["llama_cpp"]["weight_gbs"] = (
                v["weight_bytes"] * row["decode_b1"]["llama_cpp"]["median"] / 1e9)
            rows.append(row)

    out = {"provenance": prov,
           "harness": "one clock, whole processes, differences of two runs (see peer_speed.py's docstring)",
           "threads": a.threads, "repeats": a.repeats, "prompt_tokens": a.prompt_tokens,
           "gen_tokens_b1": a.gen_tokens, "gen_tokens_b32": a.gen_tokens_b32,
           "prefill_tokens": a.prefill_tokens,
           "lio_cmd": local_path_free(
               f"{a.lio} batch --model MODEL --prompts PROMPTS.jsonl --out /dev/null --max-tokens G --ignore-eos "
               "--temperature 0 --max-num-seqs B --max-num-batched-tokens max(512,B*P) --prefix-cache none "
               f"--threads {a.threads} --activations A --kv-cache-dtype KV"),
           "llama_cmd": local_path_free(
               f"{a.llama_bench} -m MODEL -c B*(P+G)+64 -b 2048 -ub 512 -npp P -ntg G -npl B "
               f"-t {a.threads} -tb {a.threads}"),
           "rows": rows}
    with open(a.out + ".json", "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")

    lines = ["# Chapter 03: LIO and llama.cpp on the same files (CPU), one harness", ""]
    lines += provenance_lines(prov)
    lines += [
        f"- Threads: {a.threads} for both engines. Model: SmolLM2-135M-Instruct, variants made by `lio quantize` "
        "from the F32 reference (embedding kept at Q8_0)" + (", and the --files as they are." if a.files else "."),
        f"- Harness: whole-process wall time, one clock for both engines, the difference of two runs that differ "
        f"only in the work measured: decode at batch 1 ({a.gen_tokens} steps) and batch 32 ({a.gen_tokens_b32} "
        f"steps) at context {a.prompt_tokens}, prefill of positions {a.prompt_tokens}..{a.prompt_tokens + a.prefill_tokens}.",
        f"- LIO: `{out['lio_cmd']}`; llama.cpp: `{out['llama_cmd']}`.",
        f"- {a.repeats} repeats, LIO and llama.cpp interleaved (A B A B). Each cell: median [min–max] tok/s; "
        "ratio: median [min–max] of the per-repeat ratios LIO / llama.cpp (above 1: LIO faster); \"tie\" when "
        "that range holds 1.",
        "",
        "| variant | grid | weight MiB | decode b1 LIO | llama.cpp | ratio | decode b32 LIO | llama.cpp | ratio "
        "| prefill LIO | llama.cpp | ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cells = [r["variant"], r["grid"] + (" (LIO KV int8, llama.cpp f16)" if r["lio_kv_cache"] == "int8" else ""),
                 f'{r["weight_mib"]:.1f}']
        for m in METRICS:
            cells += [fmt_engine(r[m]["lio"]), fmt_engine(r[m]["llama_cpp"]), fmt_ratio(r[m]["ratio"])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Rows that share a file share llama.cpp's file; its numbers differ between rows only by run-to-run "
              "variation, which is what the ranges show."]
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
