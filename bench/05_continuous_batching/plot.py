#!/usr/bin/env python3
"""Plots bench_continuous_batching's --out-json as a PNG beside it (same name, .png):
- output tok/s by arrival rate, static (padded as HF generate; and letting finished rows leave,
  where measured) vs continuous batching (continuous / static over each group)
- ITL p99 and TTFT p99 by rate, continuous batching with chunked prefill on vs off (p50 over each bar)
- the small KV pool: output tok/s by rate, recompute vs swap preemption (preemptions over each bar)
Usage: plot.py RESULT.json [RESULT.json ...]   (default: bench/results/05_continuous_batching*.json)"""
import argparse
import glob
import json
import os


import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from liobench.plot_util import bars


def rows_of(runs, variant):
    """{rate label: run} of one variant."""
    return {r["rate"]: r for r in runs if r["variant"] == variant}


def plot(path):
    d = json.load(open(path))
    runs = d["runs"]
    rates = []
    for r in runs:
        if r["rate"] not in rates:
            rates.append(r["rate"])
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.4))
    axes = axes.flatten()

    static, cont = rows_of(runs, "static"), rows_of(runs, "continuous")
    leave = rows_of(runs, "static_no_padding")
    # Results made before static padding existed have no "static_padding": their static let
    # finished rows leave the batch.
    padded = any(r.get("static_padding", False) for r in static.values())
    series = [("static (HF generate: padding)" if padded else "static (finished rows leave)", static)]
    if leave:
        series.append(("static, finished rows leave", leave))
    series.append(("continuous", cont))
    bars(axes[0], rates, series, "output_tok_s", "output tokens/s", "Static vs continuous batching")
    for j, r in enumerate(rates):
        if r in static and r in cont and static[r]["output_tok_s"] > 0:
            top = max(run[r]["output_tok_s"] for _, run in series if r in run)
            axes[0].annotate(f"{cont[r]['output_tok_s'] / static[r]['output_tok_s']:.2f}x", (j, top * 1.02),
                             ha="center", va="bottom", fontsize=8, fontweight="bold")
    axes[0].margins(y=0.15)

    nochunk = rows_of(runs, "continuous_no_chunk")
    bars(axes[1], rates, [("chunked prefill on", cont), ("chunked prefill off", nochunk)], "itl_p99_ms",
         "inter-token latency p99 (ms)", "Chunked prefill (continuous)",
         annotate=lambda run: f"p50 {run['itl_p50_ms']:.0f}" if run["itl_p50_ms"] is not None else "")

    bars(axes[2], rates, [("chunked prefill on", cont), ("chunked prefill off", nochunk)], "ttft_p99_ms",
         "time to first token p99 (ms)", "Chunked prefill (continuous)",
         annotate=lambda run: f"p50 {run['ttft_p50_ms']:.0f}" if run["ttft_p50_ms"] is not None else "")
    axes[2].set_yscale("log")

    rec, swap = rows_of(runs, "small_kv_recompute"), rows_of(runs, "small_kv_swap")
    s = d["settings"]
    bars(axes[3], rates, [("recompute", rec), ("swap", swap)], "output_tok_s", "output tokens/s",
         f"Preemption, {s['small_kv_mib']} MiB KV pool ({s['small_kv_blocks']} blocks)",
         annotate=lambda run: f"{run['preemptions']} pre.")
    axes[3].margins(y=0.15)

    fig.suptitle(f"{s['device']} | {os.path.basename(s['model'])} | {s['requests']} requests, scale {s['scale']}, "
                 f"max_num_seqs {s['max_num_seqs']}, max_num_batched_tokens {s['max_num_batched_tokens']}",
                 fontsize=9)
    fig.tight_layout()
    out = os.path.splitext(path)[0] + ".png"
    fig.savefig(out, dpi=120)
    print("wrote", out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json", nargs="*")
    a = ap.parse_args()
    paths = a.json or sorted(glob.glob("bench/results/05_continuous_batching*.json"))
    for p in paths:
        plot(p)


if __name__ == "__main__":
    main()
