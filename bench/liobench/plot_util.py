"""Shared by the benchmarks' plot.py scripts (matplotlib, Agg)."""
import argparse
import glob
import json
import os


def bars(ax, rates, series, key, ylabel, title, annotate=None):
    """Grouped bars: one group per rate label, one bar per (label, {rate: run}) in `series`,
    the height run[key] (0 where the run or the value is missing). annotate(run) -> text
    written over each bar. A run with run["spread"][key] = {"min", "max"} (the min-max over
    repeats, bench/serve/aggregate.py) gets that range as an error bar."""
    width = 0.8 / max(1, len(series))
    for i, (label, runs) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(rates))]
        ys = [runs[r][key] if r in runs and runs[r][key] is not None else 0 for r in rates]
        b = ax.bar(xs, ys, width, label=label)
        for x, y, r in zip(xs, ys, rates):
            s = (runs.get(r) or {}).get("spread", {}).get(key)
            if s and s.get("min") is not None and s.get("max") is not None:
                ax.errorbar([x], [y], yerr=[[max(0, y - s["min"])], [max(0, s["max"] - y)]], fmt="none",
                            ecolor="black", elinewidth=0.8, capsize=2)
        if annotate:
            for rect, r in zip(b, rates):
                if r in runs:
                    ax.annotate(annotate(runs[r]), (rect.get_x() + rect.get_width() / 2, rect.get_height()),
                                ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(rates)))
    ax.set_xticklabels(rates)
    ax.set_xlabel("arrival rate (requests/s)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)


def save_beside(fig, json_path):
    """Writes `fig` as a PNG beside the JSON it plots (same name, .png), with the JSON's
    "provenance" (command, commit, machine, date) in the PNG's text chunks."""
    fig.tight_layout()
    out = os.path.splitext(json_path)[0] + ".png"
    with open(json_path) as f:
        prov = json.load(f).get("provenance")
    meta = {"Source": os.path.basename(json_path)}
    if prov:
        meta["Description"] = json.dumps(prov)
    fig.savefig(out, dpi=120, metadata=meta)
    print("wrote", out)


def plot_each(plot, default_glob):
    """plot(path) for every JSON path on the command line, or else every match of default_glob."""
    ap = argparse.ArgumentParser()
    ap.add_argument("json", nargs="*")
    for p in ap.parse_args().json or sorted(glob.glob(default_glob)):
        plot(p)
