#!/usr/bin/env python3
"""Plots ch03_quantization's --json output as a PNG beside it (same name, .png):
- perplexity per variant, bars grouped by grid (RTN / GPTQ / AWQ side by side), the reference
  as a line
- weight MiB against decode tok/s at batch 1 (where measured)
A run with W8A8 or KV-cache variants (activations / kv_cache_dtype other than f32), or with
fewer than three grids (e.g. mostly --files such as llama.cpp's K-quant files), instead gets one
bar per variant: perplexity, and decode tok/s at batch 1 and 32 with prefill tok/s.
Usage: plot.py RESULT.json [RESULT.json ...]   (default: bench/results/03_quantization*.json)"""
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from liobench.plot_util import plot_each, save_beside


METHODS = ["rtn", "gptq", "awq"]


def method_of(name):
    if ":" in name:
        return name.split(":")[0]
    return "rtn" if name in ("q8_0", "q4_0", "q4_1") else "other"


def plot_runs(d, path):
    """One bar per variant: perplexity (left), decode b1 / b32 and prefill tok/s (right)."""
    vs = d["variants"]
    names = [v["variant"] for v in vs]
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(15, 5))
    bars = ax0.bar(range(len(vs)), [v["perplexity"] for v in vs], color="tab:blue")
    for rect, v in zip(bars, vs):
        ax0.annotate(f'{v["perplexity"]:.2f}\nKL {v["mean_kl"]:.3f}', (rect.get_x() + rect.get_width() / 2,
                     rect.get_height()), ha="center", va="bottom", fontsize=6)
    lo, hi = min(v["perplexity"] for v in vs), max(v["perplexity"] for v in vs)
    if hi > 3 * lo:  # 3-bit rows next to INT8 ones: a log scale keeps both readable
        ax0.set_yscale("log")
        ax0.set_ylabel("perplexity (log scale; lower is better)")
    else:
        ax0.set_ylim(lo * 0.95, hi * 1.04)
        ax0.set_ylabel("perplexity (lower is better)")
    ax0.set_title(f'quality ({os.path.basename(d["text"])}, {d["ppl_chunks"]} x {d["ppl_ctx"]} tokens)')
    width = 0.27
    for i, (key, label) in enumerate([("decode_tokens_per_s_b1", "decode b1"), ("decode_tokens_per_s_b32", "decode b32"),
                                      ("prefill_tokens_per_s", "prefill")]):
        ax1.bar([x + (i - 1) * width for x in range(len(vs))], [v.get(key) or 0 for v in vs], width, label=label)
    ax1.set_ylabel("tokens/s")
    ax1.set_title(f'speed ({d["device"]})')
    ax1.legend(fontsize=8)
    for ax in (ax0, ax1):
        ax.set_xticks(range(len(vs)))
        ax.set_xticklabels(names, rotation=35, ha="right", fontsize=7)
    fig.tight_layout()
    save_beside(fig, path)


def plot(path):
    d = json.load(open(path))
    vs = d["variants"]
    with_grid = [v for v in vs if method_of(v["variant"]) in METHODS]
    if (any(v.get("activations", "f32") != "f32" or v.get("kv_cache_dtype", "f32") != "f32" for v in vs)
            or len({v["grid"] for v in with_grid}) < 3):
        return plot_runs(d, path)
    ref = next((v for v in vs if v["variant"] == "f32"), None)
    grids = []
    for v in vs:
        if method_of(v["variant"]) in METHODS and v["grid"] not in grids:
            grids.append(v["grid"])
    speeds = [v for v in vs if v.get("decode_tokens_per_s_b1")]
    if speeds:
        fig, axes = plt.subplots(1, 2, figsize=(14, 4.8), gridspec_kw={"width_ratios": [2, 1]})
    else:
        fig, ax0 = plt.subplots(1, 1, figsize=(10, 4.8))
        axes = [ax0]
    ax = axes[0]
    width = 0.8 / len(METHODS)
    for i, m in enumerate(METHODS):
        xs, ys, labels = [], [], []
        for j, g in enumerate(grids):
            run = next((v for v in vs if v["grid"] == g and method_of(v["variant"]) == m), None)
            if run:
                xs.append(j + (i - 1) * width)
                ys.append(run["perplexity"])
                labels.append(f'KL {run["mean_kl"]:.2f}')
        bars = ax.bar(xs, ys, width, label=m.upper())
        for rect, text in zip(bars, labels):
            ax.annotate(text, (rect.get_x() + rect.get_width() / 2, rect.get_height()), ha="center", va="bottom",
                        fontsize=6)
    if ref:
        ax.axhline(ref["perplexity"], color="k", linestyle="--", linewidth=1, label=f'f32 reference {ref["perplexity"]:.2f}')
    ax.set_xticks(range(len(grids)))
    ax.set_xticklabels(grids, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("perplexity (log scale; lower is better)")
    ax.set_title(f'perplexity by grid and method ({os.path.basename(d["text"])}, {d["ppl_chunks"]} x {d["ppl_ctx"]} tokens)')
    ax.legend(fontsize=8)
    if speeds:
        ax = axes[1]
        for v in speeds:
            b1 = v["decode_tokens_per_s_b1"]
            ax.scatter(v["weight_bytes"] / 2**20, b1)
            ax.annotate(v["variant"], (v["weight_bytes"] / 2**20, b1), fontsize=7)
        ax.set_xlabel("weight MiB")
        ax.set_ylabel("decode tok/s, batch 1")
        ax.set_title("weight bytes and decode speed")
    save_beside(fig, path)


if __name__ == "__main__":
    plot_each(plot, "bench/results/03_quantization*.json")
