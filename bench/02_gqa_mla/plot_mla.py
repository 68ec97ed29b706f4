#!/usr/bin/env python3
"""Plots bench_mla's --out-json as a PNG beside it (same name, .png):
- A: decode tok/s by context, naive vs absorbed MLA (DeepSeek-V2-Lite-shaped random layers)
- B: the course model converted to MLA: mean KL (weight SVD and calibrated PCA) and perplexity
  (PCA) by latent rank, with the KV
  bytes per token as a share of GQA's on the top axis labels
Usage: plot_mla.py RESULT.json [RESULT.json ...]   (default: bench/results/02_mla*.json)"""
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from liobench.plot_util import plot_each, save_beside


def plot(path):
    d = json.load(open(path))
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    dec = d["stack"]["decode"]
    ctx = [p["context"] for p in dec]
    a.plot(ctx, [p["naive_tokens_per_s"] for p in dec], marker="o", label="naive (K, V up-projected each step)")
    a.plot(ctx, [p["absorbed_tokens_per_s"] for p in dec], marker="o", label="absorbed (attention over latents)")
    a.set_xscale("log", base=2)
    a.set_yscale("log")
    a.set_xlabel("context (tokens)")
    a.set_ylabel("decode tokens/s (batch 1)")
    a.set_title(f'MLA, DeepSeek-V2-Lite shapes, {d["stack"]["layers"]} random layers')
    a.legend(fontsize=8)
    conv = d["conversion"]
    ranks = [r["rank"] for r in conv["ranks"]]
    b.plot(ranks, [r["svd"]["mean_kl"] for r in conv["ranks"]], marker="o", color="tab:red", label="KL, weight SVD")
    b.plot(ranks, [r["pca"]["mean_kl"] for r in conv["ranks"]], marker="o", color="tab:purple", label="KL, calibrated PCA")
    b.axhline(0.05, color="gray", linestyle="--", linewidth=0.8)
    b.set_yscale("log")
    b.set_xlabel("latent rank d_c")
    b.set_ylabel("mean KL (nats)")
    b2 = b.twinx()
    b2.plot(ranks, [r["pca"]["perplexity"] for r in conv["ranks"]], marker="s", color="tab:blue", label="perplexity, PCA")
    b2.axhline(conv["stored_perplexity"], color="tab:blue", linestyle=":", linewidth=0.8)
    b2.set_ylabel("perplexity")
    share = [100 * r["kv_bytes_per_token_f16"] / conv["gqa_kv_bytes_per_token_f16"] for r in conv["ranks"]]
    b.set_xticks(ranks)
    b.set_xticklabels([f"{r}\n{s:.0f}%" for r, s in zip(ranks, share)], fontsize=7)
    b.set_title(f'course model GQA -> MLA (d_R {conv["rope_dim"]}); x: rank / KV bytes of GQA')
    h1, l1 = b.get_legend_handles_labels()
    h2, l2 = b2.get_legend_handles_labels()
    b.legend(h1 + h2, l1 + l2, fontsize=8)
    save_beside(fig, path)


if __name__ == "__main__":
    plot_each(plot, "bench/results/02_mla*.json")
