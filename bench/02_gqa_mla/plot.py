#!/usr/bin/env python3
"""Plots bench_gqa's --out-json as a PNG beside it (same name, .png):
- decode tok/s by context length, one line per variant, one panel per batch size
- KV bytes per token (f16) and mean KL against the stored model, per variant
Usage: plot.py RESULT.json [RESULT.json ...]   (default: bench/results/02_gqa*.json)"""
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from liobench.plot_util import plot_each, save_beside


def plot(path):
    d = json.load(open(path))
    vs = d["variants"]
    batches = sorted({p["batch"] for v in vs for p in v["decode"]})
    fig, axes = plt.subplots(1, len(batches) + 1, figsize=(5 * (len(batches) + 1), 4))
    for ax, b in zip(axes, batches):
        for v in vs:
            pts = sorted((p["context"], p["decode_tokens_per_s"]) for p in v["decode"] if p["batch"] == b)
            ax.plot([c for c, _ in pts], [t for _, t in pts], marker="o", label=f'{v["variant"]} ({v["n_kv_heads"]} KV heads)')
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("decode tokens/s")
        ax.set_title(f"decode, batch {b}")
        ax.legend(fontsize=8)
    ax = axes[-1]
    names = [v["variant"] for v in vs]
    kb = [v["kv_bytes_per_token_f16"] / 1024 for v in vs]
    bars = ax.bar(names, kb, color="tab:blue")
    for rect, v in zip(bars, vs):
        ax.annotate(f'KL {v["mean_kl"]:.3f}\ntop-1 {100 * v["top1_agreement"]:.0f}%\nppl {v["perplexity"]:.1f}',
                    (rect.get_x() + rect.get_width() / 2, rect.get_height()), ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("KV KiB per token (f16)")
    ax.set_title("cache size and quality vs stored GQA")
    ax.set_ylim(0, max(kb) * 1.4)
    save_beside(fig, path)


if __name__ == "__main__":
    plot_each(plot, "bench/results/02_gqa*.json")
