#!/usr/bin/env python3
"""Plots bench_serve's --json, or scripts/bench_serve.sh's aggregate of repeats
(bench/serve/aggregate.py: medians, with min-max error bars), as a PNG beside it (same name,
.png), one group of bars per request rate, one bar per target:
- output tokens/s (first target / each other over each group; with repeats the median of the
  per-repeat ratios, and "tie" where their range holds 1)
- goodput, requests/s meeting the SLOs
- TTFT p99 (p50 over each bar), log scale
- TPOT p50 (p99 over each bar)
Usage: plot.py RESULT.json [RESULT.json ...]   (default: bench/results/09_serve*.json)"""
import json
import os


import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from liobench.plot_util import bars, plot_each, save_beside


def by_target(runs):
    """{target: {rate: run}} in the order the targets first appear."""
    out = {}
    for r in runs:
        out.setdefault(r["target"], {})[r["rate"]] = r
    return out


def value(run, key):
    v = run.get(key) if run else None
    return 0 if v is None else v


def highest(run, key):
    """The top of a bar: its max over repeats where there is a spread, else its value."""
    s = (run or {}).get("spread", {}).get(key) or {}
    return s["max"] if s.get("max") is not None else value(run, key)


def plot(path):
    d = json.load(open(path))
    s = d["settings"]
    rates = s["request_rates"]
    targets = by_target(d["runs"])
    names = list(targets)
    series = list(targets.items())
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.4))
    axes = axes.flatten()

    bars(axes[0], rates, series, "output_throughput", "output tokens/s", "Output throughput")
    if len(names) > 1:
        a, b = targets[names[0]], targets[names[1]]
        spreads = {x["rate"]: x.get("spread", {}).get("output_throughput") for x in d.get("ratios", [])}
        for j, r in enumerate(rates):
            if value(b.get(r), "output_throughput") > 0:
                top = max(highest(t.get(r), "output_throughput") for t in targets.values())
                sp = spreads.get(r)
                if sp and sp.get("median") is not None:  # repeats: median of the per-repeat ratios
                    text = f'{sp["median"]:.2f}x [{sp["min"]:.2f}-{sp["max"]:.2f}]' + (" tie" if sp["tie"] else "")
                else:  # one run
                    text = f'{value(a.get(r), "output_throughput") / value(b.get(r), "output_throughput"):.2f}x'
                axes[0].annotate(text, (j, top * 1.02), ha="center", va="bottom", fontsize=8, fontweight="bold")
        axes[0].margins(y=0.15)

    slo = f"TTFT <= {s['slo_ttft_ms'] or float('inf'):g} ms, TPOT <= {s['slo_tpot_ms'] or float('inf'):g} ms"
    bars(axes[1], rates, series, "goodput", "requests/s meeting the SLOs", f"Goodput ({slo})")

    def fmt_ms(key):
        return lambda run: f"{run[key]:.0f}" if run.get(key) is not None else ""

    bars(axes[2], rates, series, "ttft_p99_ms", "time to first token p99 (ms)", "TTFT p99 (p50 above the bars)",
         annotate=fmt_ms("ttft_p50_ms"))
    axes[2].set_yscale("log")
    bars(axes[3], rates, series, "tpot_p50_ms", "time per output token p50 (ms)", "TPOT p50 (p99 above the bars)",
         annotate=fmt_ms("tpot_p99_ms"))

    m = d["machine"]
    fig.suptitle(f"{m['cpu']} ({m['cores']} cores) | {os.path.basename(s['tokenizer'])} | {s['num_prompts']} requests, "
                 f"prompt ~{s['mean_prompt_tokens']:.0f} / output ~{s['mean_output_tokens']:.0f} tokens, "
                 f"max concurrency {s['max_concurrency'] or 'unlimited'}", fontsize=9)
    save_beside(fig, path)


if __name__ == "__main__":
    plot_each(plot, "bench/results/09_serve*.json")
