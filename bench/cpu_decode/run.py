#!/usr/bin/env python3
"""Batch-1 CPU prefill and decode: LIO vs llama.cpp's llama-bench on the same GGUF files, in one run.

Files: the Q4_1 model as shipped (or --model, e.g. Gemma 3 270M Q4_K_M with --label Q4_K_M), and an F32 copy made with llama.cpp's own quantize API
(llama_model_quantize, ftype ALL_F32, allow_requantize: the Q4_1 weights dequantized).
Workloads, as llama-bench names them:
  pp512      prefill of a 512-token prompt (tok/s), from an empty context
  tg64@d128  64 decode steps after a 128-token context (tok/s)
LIO: build/bin/bench_decode, one process per measurement (its own warm-up pass, then one timed
pass): `--prompt-tokens 512 --decode-tokens 1` for pp512, `--prompt-tokens 128 --decode-tokens 64`
for tg64@d128 (it also measures a read bandwidth). On the Q4_1 file LIO runs twice, with
--activations f32 (the default: the weights exactly as stored) and --activations int8 (x rounded
to 8 bits per 32-element block: what llama.cpp does for these weights). llama.cpp: build-llama/
bin/llama-bench (bench/batched/build_llama_tools.sh --speculative builds it), one process per
measurement, `-r 1` (its own warm-up, then one timed run), on the same threads.
Achieved GB/s = the bytes one decode step reads (LIO's packed matrices; llama.cpp's file minus
its embedding table, the same count) x decode tok/s.

Repeats and ties (COURSE.md, "Performance method"): for each file the engines alternate, every
LIO setting then llama.cpp, --repeats times (default 5), so drift on a shared machine hits all.
Each repeat gives one ratio LIO / llama.cpp from its adjacent runs; the report gives each engine's
median and min-max and the ratios' median and min-max, and says "tie" when that range holds 1.

Writes bench/results/cpu_decode.json and .md (command, commit, machine and date; no local paths)
and .csv (medians, one row per file and setting: the lessons render from it).
  .venv/bin/python bench/cpu_decode/run.py [--repeats 5] [--threads 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from liobench import ROOT, flags, repo_module
from liobench.results_meta import provenance, provenance_lines
from liobench.stats import is_tie, median_min_max, spread_cell


make_f32_copy = repo_module("scripts/make_f32_copy.py").make_f32_copy

MIN_REPEATS = 5  # COURSE.md: peer comparisons repeat at least this many times
PREFILL_TOKENS = 512
DEPTH, DECODE_TOKENS = 128, 64


def run_lio(a, path, activations, prompt_tokens, decode_tokens):
    """One bench_decode process (a warm-up pass, then one timed pass); its JSON."""
    out = subprocess.run([os.path.join(a.bin, "bench_decode"), "--model", path, "--json", "--activations", activations,
                          "--prompt-tokens", str(prompt_tokens), "--decode-tokens", str(decode_tokens),
                          "--repeats", "1", "--threads", str(a.threads), "--bandwidth-gib", "0.25"],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)


def run_llama(a, path, prompt, gen, depth):
    """tok/s of one llama-bench process (-r 1: a warm-up run, then one timed run)."""
    out = subprocess.run([a.llama_bench, "-m", path, "-t", str(a.threads), "-p", str(prompt), "-n", str(gen),
                          "-d", str(depth), "-r", "1", "-o", "json"],
                         check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    return float(json.loads(out)[0]["avg_ts"])


IK_BENCH = os.path.join(ROOT, "build-ik/bin/llama-bench")
IK_REPACK = (0, 1)  # ik_llama.cpp's -rtr: its run-time repacking off and on; a report keeps its best


def add_ik_args(ap):
    """--ik-bench: ik_llama.cpp's llama-bench (bench/batched/build_llama_tools.sh --ik builds it)."""
    ap.add_argument("--ik-bench", default=IK_BENCH,
                    help="ik_llama.cpp's llama-bench (bench/batched/build_llama_tools.sh --ik); 'none' leaves it out")


def ik_wanted(a):
    """Whether this run measures ik_llama.cpp: --ik-bench names a built binary (exits if it names none)."""
    if a.ik_bench == "none":
        return False
    if not os.path.exists(a.ik_bench):
        sys.exit(f"no {a.ik_bench}: run bench/batched/build_llama_tools.sh --ik (or pass --ik-bench none)")
    return True


def run_ik(a, path, prompt, gen, depth, rtr):
    """tok/s of one ik_llama.cpp llama-bench process (-r 1: a warm-up run, then one timed run), -rtr `rtr`.
    Its llama-bench has no -d: decode after a `depth`-token context is `-gp depth,gen`, which prefills the
    depth tokens and times the gen tokens alone (llama-bench.cpp, TEST_KIND_GP)."""
    cmd = [a.ik_bench, "-m", path, "-t", str(a.threads), "-r", "1", "-o", "json", "-rtr", str(rtr)]
    if gen > 0:
        cmd += ["-p", "0", "-n", "0", "-gp", f"{depth},{gen}"] if depth > 0 else ["-p", "0", "-n", str(gen)]
    else:
        cmd += ["-p", str(prompt), "-n", "0"]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    return float(json.loads(out)[0]["avg_ts"])


def best_ik(runs, key):
    """ik_llama.cpp's best -rtr setting for measurement `key` over the rounds (the higher median):
    (rtr, that setting's per-round values)."""
    best = max(IK_REPACK, key=lambda rtr: statistics.median(r["ik"][str(rtr)][key] for r in runs))
    return best, [r["ik"][str(best)][key] for r in runs]


PEAK_KEYS = ("compute_peak_isa", "compute_peak_f32_gflops", "compute_peak_int8_gops")  # bench_decode's JSON


def compute_peak(results):
    """Medians of bench_decode's compute probe over every LIO run in `results` (run.py's per-file
    rounds): {"isa", "f32_gflops" (GFLOP/s), "int8_gops" (GOP/s)}, or None when the binary predates it."""
    peaks = [v["compute_peak"] for res in results for r in res["runs"] for v in r["lio"].values()
             if (v.get("compute_peak") or {}).get("compute_peak_isa")]
    if not peaks:
        return None
    return {"isa": peaks[0]["compute_peak_isa"],
            "f32_gflops": statistics.median(p["compute_peak_f32_gflops"] for p in peaks),
            "int8_gops": statistics.median(p["compute_peak_int8_gops"] for p in peaks)}


spread = median_min_max  # (median, min, max) of the samples; formats.py imports it from here


def cell(values, digits=1):
    """'median [min–max]' of the samples, `digits` decimals."""
    return spread_cell(median_min_max(values), digits)


def ratio_cell(pairs):
    """Median [min–max] of the per-repeat ratios ours / theirs, "tie" when the range holds 1."""
    m, lo, hi = median_min_max([x / y for x, y in pairs])
    text = spread_cell((m, lo, hi), 2)
    return (f"tie ({text})" if is_tie(lo, hi) else text), (m, lo, hi)


def write_plot(path, rows):
    """Bars of tok/s, LIO settings beside llama.cpp, prefill and decode; min-max as error bars."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, (key, title) in zip(axes, (("pp", f"prefill pp{PREFILL_TOKENS}"), ("tg", f"decode tg{DECODE_TOKENS}@d{DEPTH}"))):
        labels, values, lows, highs, colors = [], [], [], [], []
        for weights in dict.fromkeys(r["weights"] for r in rows):
            group = [r for r in rows if r["weights"] == weights]
            for r in group:
                m, lo, hi = r[f"lio_{key}"]
                labels.append(f"{weights}\nLIO {r['activations']}")
                values.append(m), lows.append(m - lo), highs.append(hi - m), colors.append("C0")
            m, lo, hi = group[0][f"llama_{key}"]
            labels.append(f"{weights}\nllama.cpp")
            values.append(m), lows.append(m - lo), highs.append(hi - m), colors.append("C1")
        ax.bar(range(len(values)), values, yerr=[lows, highs], color=colors, capsize=3)
        ax.set_xticks(range(len(values)), labels, fontsize=8)
        ax.set_ylabel("tok/s (median, min-max)")
        ax.set_title(title)
    fig.suptitle("Batch-1 CPU prefill and decode, 2 threads: LIO vs llama-bench")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    flags.add_model(ap)
    flags.add_bin(ap)
    ap.add_argument("--llama-bench", default=os.path.join(ROOT, "build-llama/bin/llama-bench"))
    add_ik_args(ap)
    ap.add_argument("--repeats", type=int, default=MIN_REPEATS,
                    help=f"interleaved rounds per file (COURSE.md: >= {MIN_REPEATS})")
    flags.add_threads(ap)
    ap.add_argument("--f32-model", help="its F32 copy (default: <model dir>/SmolLM2-135M-Instruct.F32.gguf, made "
                    "with llama.cpp's quantize API when missing)")
    ap.add_argument("--label", default="Q4_1", help="how the report names --model's weights (e.g. Q4_K_M)")
    ap.add_argument("--description", default="SmolLM2-135M-Instruct as shipped (Q4_1, token_embd Q8_0)",
                    help="the model line of the report")
    flags.add_out(ap, "cpu_decode")
    ap.add_argument("--plot-only", action="store_true", help="redraw OUT.png from OUT.json")
    a = ap.parse_args()
    if a.plot_only:
        with open(a.out + ".json") as f:
            write_plot(a.out + ".png", json.load(f)["rows"])
        return
    if not os.path.exists(a.llama_bench):
        sys.exit(f"no {a.llama_bench}: run bench/batched/build_llama_tools.sh --speculative")
    ik = ik_wanted(a)
    below_rule = a.repeats < MIN_REPEATS
    if below_rule:
        print(f"warning: --repeats {a.repeats}: COURSE.md asks for at least {MIN_REPEATS} to call a ratio", file=sys.stderr)
    prov = provenance()
    f32 = a.f32_model or os.path.join(os.path.dirname(a.model), "SmolLM2-135M-Instruct.F32.gguf")
    make_f32_copy(a.model, f32)

    files = ((a.label, a.model, ("int8", "f32")), ("F32", f32, ("f32",)))
    results = []
    for label, path, settings in files:
        runs = []
        for rep in range(a.repeats):  # every LIO setting, then llama.cpp, each round
            run = {"repeat": rep + 1, "lio": {}}
            for act in settings:
                pre = run_lio(a, path, act, PREFILL_TOKENS, 1)
                dec = run_lio(a, path, act, DEPTH, DECODE_TOKENS)
                run["lio"][act] = {"pp": pre["prefill_tokens_per_s"], "tg": dec["decode_tokens_per_s"],
                                   "read_bw_gbs": dec["read_bandwidth_gbs"], "decode_bytes": dec["weight_bytes"],
                                   "isa": dec.get("isa"),
                                   "compute_peak": {k: dec.get(k) for k in PEAK_KEYS}}
            run["llama"] = {"pp": run_llama(a, path, PREFILL_TOKENS, 0, 0),
                            "tg": run_llama(a, path, 0, DECODE_TOKENS, DEPTH)}
            if ik:
                run["ik"] = {str(rtr): {"pp": run_ik(a, path, PREFILL_TOKENS, 0, 0, rtr),
                                        "tg": run_ik(a, path, 0, DECODE_TOKENS, DEPTH, rtr)} for rtr in IK_REPACK}
            runs.append(run)
            print(f"{label} round {rep + 1}/{a.repeats}: " + ", ".join(
                f"LIO {act} pp {v['pp']:.0f} tg {v['tg']:.1f}" for act, v in run["lio"].items())
                + f"; llama.cpp pp {run['llama']['pp']:.0f} tg {run['llama']['tg']:.1f}"
                + "".join(f"; ik -rtr {k} pp {v['pp']:.0f} tg {v['tg']:.1f}" for k, v in run.get("ik", {}).items()),
                flush=True)
        results.append({"weights": label, "settings": list(settings), "runs": runs})

    lines = ["# CPU batch-1 prefill and decode: LIO vs llama.cpp" + (" and ik_llama.cpp" if ik else "") + " (llama-bench)",
             ""]
    lines += provenance_lines(prov)
    peak = compute_peak(results)
    if peak:
        lines += [f"- Compute peak (bench_decode's probe, every LIO run, {a.threads} threads, {peak['isa']}): f32 "
                  f"{peak['f32_gflops']:.0f} GFLOP/s, int8 {peak['int8_gops']:.0f} GOP/s (medians); prefill does 2 "
                  "ops per weight per token, so pp tok/s x 2 x weights against these is its fraction of the peak"]
    lines += [f"- Threads: {a.threads} for both engines; LIO's matmul kernels: "
              f"{results[0]['runs'][0]['lio']['f32']['isa']} (chosen at run time)",
              *([f"- ik_llama.cpp (`bench/batched/build_llama_tools.sh --ik`: ik-llama-cpp-python's vendored sources, "
                 "the fork built for CPU speed): its llama-bench, `-p "
                 f"{PREFILL_TOKENS} -n 0` and `-p 0 -n 0 -gp {DEPTH},{DECODE_TOKENS}` (it has no `-d`; `-gp` times the "
                 f"{DECODE_TOKENS} tokens after a {DEPTH}-token prompt), each with `-rtr 0` and `-rtr 1` (run-time "
                 "repacking) in every round; a cell is its better setting (named) by median"] if ik else []),
              f"- Model: {a.description} and its F32 copy made by llama.cpp's "
              f"quantize API (the {a.label} weights dequantized)",
              f"- Workloads: pp{PREFILL_TOKENS} (prefill tok/s from an empty context) and tg{DECODE_TOKENS}@d{DEPTH} "
              f"(decode tok/s after a {DEPTH}-token context), llama-bench's names; llama.cpp: `llama-bench -p "
              f"{PREFILL_TOKENS} -n 0` and `-p 0 -n {DECODE_TOKENS} -d {DEPTH}`, `-r 1` each; LIO: "
              "`bench_decode --repeats 1` (a warm-up pass, then one timed pass)",
              f"- LIO's activations on the {a.label} file: int8 (per 32-element block, as llama.cpp rounds them for these "
              "weights: `lio generate`'s default on quantized weights) and f32 (the weights exactly as stored); "
              "bench/results/cpu_activations_kl.md has their accuracy",
              f"- Peer rule (COURSE.md): {a.repeats} rounds per file, the engines alternating in each; cells are "
              "median [min–max] tok/s; ratios are median [min–max] of the per-round ratios LIO / llama.cpp (above 1: "
              "LIO faster), \"tie\" when that range holds 1" + (
                  f". **Below the rule**: fewer than {MIN_REPEATS} rounds." if below_rule else ""),
              "- GB/s: the bytes one decode step reads (the matrices, not the embedding table) x tg tok/s; read "
              "bandwidth: bench_decode's probe in the same runs (median)", "",
              "| weights | LIO activations | pp tok/s LIO | llama.cpp | LIO / llama.cpp | "
              + ("ik_llama.cpp | LIO / ik | " if ik else "") + "tg tok/s LIO | llama.cpp | LIO / llama.cpp | "
              + ("ik_llama.cpp | LIO / ik | " if ik else "") + "decode MB | LIO GB/s (% of read bw) | llama.cpp GB/s | "
              "read GB/s |",
              "|---|---|---:|---:|---:|" + ("---:|---:|" if ik else "") + "---:|---:|---:|" + ("---:|---:|" if ik else "")
              + "---:|---:|---:|---:|"]
    summary = []
    for res in results:
        runs = res["runs"]
        llama_pp = [r["llama"]["pp"] for r in runs]
        llama_tg = [r["llama"]["tg"] for r in runs]
        for act in res["settings"]:
            pp = [r["lio"][act]["pp"] for r in runs]
            tg = [r["lio"][act]["tg"] for r in runs]
            bw = statistics.median(r["lio"][act]["read_bw_gbs"] for r in runs)
            mb = runs[0]["lio"][act]["decode_bytes"]
            pp_cell, pp_ratio = ratio_cell(list(zip(pp, llama_pp)))
            tg_cell, tg_ratio = ratio_cell(list(zip(tg, llama_tg)))
            gbs = mb * statistics.median(tg) / 1e9
            ik_cells = {}
            row = {"weights": res["weights"], "activations": act, "lio_pp": spread(pp), "llama_pp": spread(llama_pp),
                   "pp_ratio": pp_ratio, "lio_tg": spread(tg), "llama_tg": spread(llama_tg),
                   "tg_ratio": tg_ratio, "decode_bytes": mb, "lio_decode_gbs": gbs, "read_bw_gbs": bw}
            if ik:
                for key, ours in (("pp", pp), ("tg", tg)):
                    rtr, theirs = best_ik(runs, key)
                    text, ratio = ratio_cell(list(zip(ours, theirs)))
                    ik_cells[key] = f"{cell(theirs)} (rtr {rtr}) | {text} | "
                    row[f"ik_{key}"], row[f"ik_{key}_rtr"], row[f"{key}_ratio_ik"] = spread(theirs), rtr, ratio
            lines.append(f"| {res['weights']} | {act} | {cell(pp)} | {cell(llama_pp)} | {pp_cell} | {ik_cells.get('pp', '')}"
                         f"{cell(tg)} | {cell(llama_tg)} | {tg_cell} | {ik_cells.get('tg', '')}{mb / 1e6:.1f} | "
                         f"{gbs:.1f} ({100 * gbs / bw:.0f}%) | {mb * statistics.median(llama_tg) / 1e9:.1f} | {bw:.1f} |")
            summary.append(row)
    lines += ["", f"![batch-1 prefill and decode]({os.path.basename(a.out)}.png)", ""]
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out + ".json", "w") as f:
        json.dump({"provenance": prov, "threads": a.threads, "prefill_tokens": PREFILL_TOKENS, "depth": DEPTH,
                   "decode_tokens": DECODE_TOKENS, "repeats": a.repeats, "min_repeats_rule": MIN_REPEATS,
                   "compute_peak": peak, "rows": summary, "files": results}, f, indent=2)
        f.write("\n")
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    # The CSV the lessons render from (chapters 01 and 05, docs/cuda_backend.md): one row per file
    # and LIO setting, the f32-activation rows under the file's bare name ("Q4_1", "F32"), medians.
    cols = ["weights", "weight_mib", "read_bw_gbs", "lio_prefill_tps", "llama_prefill_tps", "prefill_ratio",
            "lio_decode_tps", "llama_decode_tps", "decode_ratio", "lio_decode_gbs", "llama_decode_gbs", "lio_pct_bw",
            "llama_pct_bw"]
    with open(a.out + ".csv", "w") as f:
        f.write(",".join(cols) + "\n")
        for r in summary:
            name = r["weights"] if r["activations"] == "f32" else f"{r['weights']} {r['activations']}"
            llama_gbs = r["decode_bytes"] * r["llama_tg"][0] / 1e9
            vals = [name, r["decode_bytes"] / 2**20, r["read_bw_gbs"], r["lio_pp"][0], r["llama_pp"][0],
                    r["pp_ratio"][0], r["lio_tg"][0], r["llama_tg"][0], r["tg_ratio"][0], r["lio_decode_gbs"],
                    llama_gbs, 100 * r["lio_decode_gbs"] / r["read_bw_gbs"], 100 * llama_gbs / r["read_bw_gbs"]]
            f.write(",".join(v if isinstance(v, str) else f"{v:.4g}" for v in vals) + "\n")
    write_plot(a.out + ".png", summary)
    print(f"wrote {a.out}.json, .md and .csv")


if __name__ == "__main__":
    main()
