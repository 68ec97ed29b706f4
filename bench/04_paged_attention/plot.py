#!/usr/bin/env python3
"""Plots chapter 04's benchmark results (bench/results/04_*.json) as PNGs beside them:
- 04_paged_memory.png    token states % of reserved KV and running batch, per scheme (bench_paged_memory)
- 04_indirection.png     paged / one-block time by context and block size (bench_[cuda_]paged_indirection)
- 04_paged_engine.png    prefix caching TTFT and prefill tokens, parallel-sampling KV (bench_paged_engine)
Each plot is made only when its JSON file exists."""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_memory(path, out):
    d = json.load(open(path))
    sets = [k for k in d if k not in ("settings", "provenance")]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(sets)
    for i, name in enumerate(sets):
        rows = d[name]["rows"]
        x = [j + i * width for j in range(len(rows))]
        axes[0].bar(x, [r["util_pct"] for r in rows], width, label=name)
        axes[1].bar(x, [r["mean_running"] / rows[0]["mean_running"] for r in rows], width, label=name)
    labels = [r["scheme"] for r in d[sets[0]]["rows"]]
    for ax in axes:
        ax.set_xticks([j + width * (len(sets) - 1) / 2 for j in range(len(labels))])
        ax.set_xticklabels(labels, rotation=35, ha="right")
        ax.legend()
    axes[0].set_ylabel("KV slots holding token states (%)")
    axes[0].axhline(96, color="gray", ls=":", lw=1)
    axes[1].set_ylabel("mean running requests vs static max (x)")
    s = d["settings"]
    fig.suptitle(f"KV budget {s['budget_tokens']} token slots, max_len {s['max_len']}, {s['requests']} requests")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def plot_indirection(paths, out):
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for path in paths:
        d = json.load(open(path))
        tag = d.get("device") or d.get("cpu", "cpu")
        rows = d.get("batch_rows") or d["rows"]  # CUDA: batch and single tables; CPU: one
        sizes = sorted({v["block_size"] for r in rows for v in r["variants"] if v["variant"] == "paged_scattered"})
        for bs in sizes:
            xs = [r["n_ctx"] for r in rows]
            ys = [next(v["ratio_vs_one_block"] for v in r["variants"]
                       if v["variant"] == "paged_scattered" and v["block_size"] == bs) for r in rows]
            ax.plot(xs, ys, "o-", label=f"{tag[:24]}, block {bs}")
    ax.axhline(1.0, color="gray", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("scattered blocks / one in-order block (time)")
    ax.set_title("Cost of the block table alone (same kernel)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def plot_engine(path, out):
    d = json.load(open(path))
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    p1 = d["shared_system_prompt"]
    labels = [f"{r['prefix_cache']}\n{'warm' if r['warm'] else 'cold'}" for r in p1]
    axes[0].bar(labels, [r["median_ttft_ms"] for r in p1], color="tab:blue")
    axes[0].set_ylabel("median TTFT (ms)")
    axes[0].set_title("Shared system prompt")
    p2 = d["multi_turn"]
    axes[1].bar([r["prefix_cache"] for r in p2], [r["prefill_tokens"] for r in p2], color="tab:green")
    axes[1].set_ylabel("prefill tokens computed")
    axes[1].set_title("Multi-turn chat")
    p3 = d["parallel_sampling"]
    ns = [str(r["n"]) for r in p3]
    x = range(len(ns))
    axes[2].bar([i - 0.2 for i in x], [r["independent_peak_blocks"] for r in p3], 0.4, label="n requests")
    axes[2].bar([i + 0.2 for i in x], [r["shared_peak_blocks"] for r in p3], 0.4, label="one request, n samples")
    axes[2].set_xticks(list(x))
    axes[2].set_xticklabels(ns)
    axes[2].set_xlabel("samples n")
    axes[2].set_ylabel("peak KV blocks")
    axes[2].set_title("Parallel sampling")
    axes[2].legend()
    fig.suptitle(d["settings"]["device"])
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="bench/results")
    a = ap.parse_args()
    j = lambda name: os.path.join(a.dir, name)  # noqa: E731
    if os.path.exists(j("04_paged_memory.json")):
        plot_memory(j("04_paged_memory.json"), j("04_paged_memory.png"))
    ind = [j(f) for f in ("04_indirection_cpu.json", "04_indirection_h100.json") if os.path.exists(j(f))]
    if ind:
        plot_indirection(ind, j("04_indirection.png"))
    for name in sorted(os.listdir(a.dir)):
        if name.startswith("04_paged_engine") and name.endswith(".json"):
            plot_engine(j(name), j(name[:-5] + ".png"))


if __name__ == "__main__":
    main()
