#!/usr/bin/env python3
"""Chapter 06's benchmark: speculative decoding against plain decoding on the same engine, the
same files and the same run (COURSE.md, "Performance method").

    .venv/bin/python bench/06_speculative/run.py [--repeats 2] [--max-tokens 64] [--quick]

1. Batch 1, per drafter and k = 1..8 (build/bin/ch06_speculative --json): target the F32 copy,
   drafts the shipped Q4_1 file and a 3-bit RTN file made here by `lio quantize` (models/, not
   committed), n-gram lookup, early exit at L = 20 and an L sweep at k = 2; a grounded prompt
   (edit a given text) and a free-form one; plain and speculative runs interleaved, `--repeats`
   times, median speedup with its min-max.
2. Against batch size (`lio batch`, N = 1, 4, 16, 32 requests at once, half grounded, half free):
   output tok/s with speculation (n-gram and the Q4_1 draft, k = 4) and without, interleaved,
   median of `--repeats`: where speculation stops paying.

Writes bench/results/06_speculative_cpu.{json,md,png} (the lesson renders its tables from the
JSON). Nothing here is a test; learners run it to reproduce the chapter's tables.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from liobench import ROOT, flags
from liobench.results_meta import provenance, provenance_lines, write_results


BIN = os.path.join(ROOT, "build", "bin")
MODELS = os.path.join(ROOT, "models")
Q4 = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
F32 = os.path.join(MODELS, "SmolLM2-135M-Instruct.F32.gguf")
Q3 = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q3_0-rtn.gguf")
GROUNDED = ("Rewrite the following paragraph, replacing every occurrence of the word \"cat\" with \"dog\" and "
            "changing nothing else:\n\nThe cat sat on the mat by the window. Every morning the cat watched the "
            "birds in the garden, and every evening the cat slept by the fire. The neighbours said the cat was "
            "the calmest animal on the street, and the children loved to read stories to the cat after school.")
FREE = "Write a short story about a robot who learns to paint."


def run(cmd, **kw):
    print("+ " + " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, text=True, stdout=subprocess.PIPE, **kw).stdout


def ch06(args, extra):
    out = run([os.path.join(BIN, "ch06_speculative"), "--json", "--model", F32, "--repeats", str(args.repeats),
               "--max-tokens", str(args.max_tokens), "--k-max", str(args.k_max)] + extra)
    return json.loads(out)


def batch_sweep(args):
    """Output tok/s of `lio batch` with N requests at once, per speculation setting, interleaved."""
    settings = [("none", []), ("ngram", ["--spec-method", "ngram", "--num-speculative-tokens", "4"]),
                ("draft", ["--spec-method", "draft", "--draft-model", Q4, "--num-speculative-tokens", "4"])]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.batch_sizes:
            prompts = os.path.join(tmp, f"p{n}.jsonl")
            with open(prompts, "w") as f:
                for i in range(n):
                    text = GROUNDED if i % 2 == 0 else FREE
                    f.write(json.dumps({"messages": [{"role": "user", "content": text}]}) + "\n")
            tps = {name: [] for name, _ in settings}
            acc = {}
            for _ in range(args.repeats):
                for name, flags in settings:  # interleaved: none, ngram, draft, none, ...
                    summary = os.path.join(tmp, "s.json")
                    run([os.path.join(BIN, "lio"), "batch", "--model", F32, "--prompts", prompts, "--out", os.devnull,
                         "--summary", summary, "--max-tokens", str(args.max_tokens), "--ignore-eos", "--temperature",
                         "0", "--max-num-seqs", str(n)] + flags, stderr=subprocess.DEVNULL)
                    s = json.load(open(summary))
                    tps[name].append(s["output_tok_per_s"])
                    acc[name] = s.get("acceptance_rate")
            base = statistics.median(tps["none"])
            for name, _ in settings:
                ratios = [t / b for t, b in zip(tps[name], tps["none"])]
                rows.append({"batch": n, "method": name, "output_tok_per_s": statistics.median(tps[name]),
                             "runs": tps[name], "speedup": statistics.median(tps[name]) / base,
                             "speedup_min": min(ratios), "speedup_max": max(ratios), "acceptance_rate": acc[name]})
    return rows


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    ax = axes[0]
    colors = {"draft": "C0", "draft-q3": "C4", "ngram": "C1", "early-exit": "C2"}
    for part, label_of in (("batch1", lambda m: m), ("batch1_q3", lambda m: "draft-q3")):
        for r_method in sorted({r["method"] for r in result[part]["runs"]}):
            for prompt, style in (("grounded", "-"), ("free", "--")):
                rs = [r for r in result[part]["runs"]
                      if r["method"] == r_method and r["prompt"] == prompt and "sweep" not in r]
                if not rs:
                    continue
                label = label_of(r_method)
                ks = [r["k"] for r in rs]
                ax.errorbar(ks, [r["speedup"] for r in rs],
                            yerr=[[r["speedup"] - r["speedup_min"] for r in rs], [r["speedup_max"] - r["speedup"] for r in rs]],
                            fmt="o" + style, color=colors.get(label, "C5"), label=f"{label}, {prompt}", ms=4, capsize=2)
                ax.plot(ks, [r["predicted_speedup_v"] for r in rs], ":", color=colors.get(label, "C5"), lw=1)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("k (speculative tokens per step)")
    ax.set_ylabel("decode speedup over plain (batch 1)")
    ax.set_title("measured (points, min-max) vs E / (k c + v(k)) (dotted)", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[1]
    for method in ("ngram", "draft"):
        rs = [r for r in result["batch_sweep"] if r["method"] == method]
        ax.errorbar([r["batch"] for r in rs], [r["speedup"] for r in rs],
                    yerr=[[r["speedup"] - r["speedup_min"] for r in rs], [r["speedup_max"] - r["speedup"] for r in rs]],
                    fmt="o-", label=f"{method}, k = 4", capsize=2)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("requests decoding at once (lio batch)")
    ax.set_ylabel("output tok/s, speculative / plain")
    ax.set_title("where speculation stops paying")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown(result):
    lines = ["# Chapter 06: speculative decoding on the CPU", ""] + provenance_lines(result["provenance"]) + [""]
    b1 = result["batch1"]
    lines += [f"Target `{os.path.basename(b1['target'])}`; plain decoding "
              f"{b1['plain_tokens_per_s']['grounded']:.1f} tok/s (grounded prompt), "
              f"{b1['plain_tokens_per_s']['free']:.1f} tok/s (free); {b1['device']}.", "",
              "## Batch 1, per drafter and k (median speedup over plain, min-max over repeats)", "",
              "| drafter | L | prompt | k | acceptance | tokens/pass | a | c | v(k) | tok/s | speedup | predicted (v = 1) "
              "| predicted with v(k) |",
              "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for part, name in (("batch1", None), ("batch1_q3", "draft (3-bit)")):
        for r in result[part]["runs"]:
            method = name or {"draft": "draft (Q4_1)"}.get(r["method"], r["method"])
            lines.append(f"| {method} | {r['draft_layers'] or ''} | {r['prompt']} | {r['k']} | {r['acceptance_rate']:.3f} | "
                         f"{r['tokens_per_pass']:.2f} | {r['a']:.3f} | {r['c']:.3f} | {r['v']:.2f} | {r['tokens_per_s']:.1f} | "
                         f"{r['speedup']:.2f}x ({r['speedup_min']:.2f}-{r['speedup_max']:.2f}) | {r['predicted_speedup']:.2f}x | "
                         f"{r['predicted_speedup_v']:.2f}x |")
    lines += ["", "## Against batch size (`lio batch`, k = 4, output tok/s)", "",
              "| requests | drafter | output tok/s | speedup (min-max) | acceptance |", "|---:|---|---:|---:|---:|"]
    for r in result["batch_sweep"]:
        acc = "" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.3f}"
        lines.append(f"| {r['batch']} | {r['method']} | {r['output_tok_per_s']:.1f} | {r['speedup']:.2f}x "
                     f"({r['speedup_min']:.2f}-{r['speedup_max']:.2f}) | {acc} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    flags.add_repeats(ap, 2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--k-max", type=int, default=8)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 16, 32])
    ap.add_argument("--quick", action="store_true", help="k <= 4, one repeat, batch sizes 1 and 16 (a smoke run)")
    flags.add_out(ap, "06_speculative_cpu")
    args = ap.parse_args()
    if args.quick:
        args.repeats, args.k_max, args.batch_sizes = 1, 4, [1, 16]
    for f in (Q4, F32):
        if not os.path.exists(f):
            sys.exit(f"run.py: {os.path.relpath(f, ROOT)} is missing (run scripts/setup.sh)")
    if not os.path.exists(Q3):
        run([os.path.join(BIN, "lio"), "quantize", "--model", F32, "--out", Q3, "--bits", "3", "--method", "rtn"],
            stderr=subprocess.DEVNULL)
    result = {"provenance": provenance(command="bench/06_speculative/run.py " + " ".join(sys.argv[1:]))}
    result["batch1"] = ch06(args, ["--draft-model", Q4])
    result["batch1_q3"] = ch06(args, ["--draft-model", Q3, "--methods", "draft"])
    result["batch_sweep"] = batch_sweep(args)
    result = write_results(args.out, result, markdown)
    plot(result, args.out + ".png")
    print(f"wrote {os.path.relpath(args.out, ROOT)}.json, .md, .png", file=sys.stderr)


if __name__ == "__main__":
    main()
