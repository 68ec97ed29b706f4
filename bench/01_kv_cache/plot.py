#!/usr/bin/env python3
"""Plots bench/results/01_kv_cache.csv (from bench_kv_cache) as time vs generated length
for the cached and recompute modes, with the ratio on a second axis."""
import argparse
import csv

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", default="bench/results/01_kv_cache.csv")
    ap.add_argument("--out", default="bench/results/01_kv_cache.png")
    ap.add_argument("--title", default="SmolLM2-135M Q4_1, CPU, batch 1, 32-token prompt")
    a = ap.parse_args()
    rows = list(csv.DictReader(open(a.csv)))
    n = [int(r["gen_tokens"]) for r in rows]
    cached = [float(r["cached_ms_median"]) / 1000 for r in rows]
    recompute = [float(r["recompute_ms_median"]) / 1000 for r in rows]
    ratio = [float(r["ratio"]) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(n, recompute, "o-", label="recompute (no cache)", color="tab:red")
    ax.plot(n, cached, "o-", label="KV cache", color="tab:blue")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("generated tokens")
    ax.set_ylabel("total generation time (s, median)")
    ax2 = ax.twinx()
    ax2.plot(n, ratio, "s--", color="tab:gray", label="speedup (recompute / cached)")
    ax2.set_ylabel("speedup (x)")
    for x, r in zip(n, ratio):
        ax2.annotate(f"{r:.1f}x", (x, r), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper left", fontsize=8)
    ax.set_title(a.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
