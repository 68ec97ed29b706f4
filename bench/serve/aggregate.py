#!/usr/bin/env python3
"""Aggregates scripts/bench_serve.sh's repeats: one bench_serve --json per (rate, repeat), each
with lio-server then llama-server on the same requests (the targets run in the order given, so
the servers alternate A B A B over the repeats at each rate). Writes one JSON and prints the
Markdown tables (COURSE.md, "Performance method"): per target and rate, the median and min-max
of each metric over the repeats; per rate, the median and min-max of the per-repeat ratios
first target / second target, and "tie" where that range holds 1.

The JSON keeps the shape bench_serve writes for one run, so bench/serve/plot.py and the docs'
render directives read it as before: "runs" holds one row per (target, rate) with every number
the median over the repeats (and "spread": {metric: {median, min, max, runs}}), "ratios" one row
per rate with every ratio the median of the per-repeat ratios (and "spread": {metric: {median,
min, max, runs, tie}}); "repeat_runs" keeps every run as bench_serve wrote it, with its repeat.

Usage: aggregate.py --out OUT.json --repeats R --command "scripts/bench_serve.sh ..." RUN.json ...
Standard library only.
"""
import argparse
import json
import statistics

from liobench import flags
from liobench.results_meta import provenance, provenance_lines


MIN_REPEATS = 5  # COURSE.md: peer comparisons repeat at least this many times
# (column, key) of the per-target table, and the ratios bench_serve reports (first / other)
TABLE = (("out tok/s", "output_throughput"), ("req/s", "request_throughput"), ("goodput req/s", "goodput"),
         ("TTFT p50", "ttft_p50_ms"), ("TTFT p99", "ttft_p99_ms"), ("TPOT p50", "tpot_p50_ms"),
         ("TPOT p99", "tpot_p99_ms"), ("ITL p99", "itl_p99_ms"), ("E2E p50", "e2e_p50_ms"))
RATIOS = (("out tok/s", "output_throughput", "output_throughput"), ("goodput", "goodput", "goodput"),
          ("TTFT p99", "ttft_p99", "ttft_p99_ms"), ("TPOT p50", "tpot_p50", "tpot_p50_ms"),
          ("E2E p50", "e2e_p50", "e2e_p50_ms"))


def summary(values):
    """{median, min, max, runs} of the numbers among values (None: no number)."""
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not nums:
        return {"median": None, "min": None, "max": None, "runs": values}
    return {"median": statistics.median(nums), "min": min(nums), "max": max(nums), "runs": values}


def cell(s, digits=1):
    if s["median"] is None:
        return "-"
    if s["min"] == s["max"]:
        return f'{s["median"]:.{digits}f}'
    return f'{s["median"]:.{digits}f} [{s["min"]:.{digits}f}–{s["max"]:.{digits}f}]'


def ratio_cell(s):
    if s["median"] is None:
        return "-"
    text = cell(s, 2) + "x"
    return f"tie ({text})" if s["tie"] else text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="bench_serve --json files, one per (rate, repeat)")
    flags.add_out(ap)
    ap.add_argument("--repeats", type=int, required=True)
    ap.add_argument("--command", default=None, help="the command to record (default: this one)")
    a = ap.parse_args()

    files = [json.load(open(p)) for p in a.runs]
    first = files[0]
    targets = [t["name"] for t in first["targets"]]
    rates, raw = [], []   # rates in the order they first appear; raw: every run with its repeat
    seen = {}
    for d in files:
        rate = d["settings"]["request_rates"][0]
        if rate not in rates:
            rates.append(rate)
        rep = seen[rate] = seen.get(rate, 0) + 1
        for r in d["runs"]:
            raw.append(dict(r, repeat=rep, seed=d["settings"]["seed"]))

    def runs_of(target, rate):
        return [r for r in raw if r["target"] == target and r["rate"] == rate]

    numeric = [k for k, v in raw[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)
               and k not in ("repeat", "seed")]
    rows = []
    for rate in rates:
        for t in targets:
            rs = runs_of(t, rate)
            row = {"target": t, "rate": rate, "repeats": len(rs)}
            spread = {k: summary([r.get(k) for r in rs]) for k in numeric}
            row.update({k: s["median"] for k, s in spread.items()})
            for k in ("completed", "failed", "short_outputs", "prompt_count_mismatch"):
                if k in row:
                    row[k] = sum(r[k] for r in rs)  # counts: totals over the repeats
            row["errors"] = [e for r in rs for e in r.get("errors", [])][:3]
            row["spread"] = spread
            rows.append(row)

    ratios = []
    if len(targets) > 1:
        num, den = targets[0], targets[1]
        for rate in rates:
            a_runs = {r["repeat"]: r for r in runs_of(num, rate)}
            b_runs = {r["repeat"]: r for r in runs_of(den, rate)}
            row = {"rate": rate, "numerator": num, "denominator": den, "spread": {}}
            for _, name, key in RATIOS:
                per = []
                for rep in sorted(a_runs):
                    x, y = a_runs[rep].get(key), b_runs.get(rep, {}).get(key)
                    per.append(x / y if x is not None and y else None)  # over zero: no number
                s = summary(per)
                s["tie"] = s["median"] is not None and s["min"] <= 1.0 <= s["max"]
                row[name] = s["median"]
                row["spread"][name] = s
            ratios.append(row)

    settings = dict(first["settings"])
    settings["request_rates"] = rates
    settings["seed"] = min(d["settings"]["seed"] for d in files)
    settings["seeds"] = "seed + rate index x repeats + repeat - 1: new prompts in every run"
    settings["command"] = "one bench_serve per (rate, repeat); see repeat_runs and each run's settings"
    for k in ("mean_prompt_tokens", "mean_output_tokens"):
        settings[k] = statistics.mean(d["settings"][k] for d in files)
    machine = dict(first["machine"])
    machine["load_average_end"] = files[-1]["machine"].get("load_average_end")
    prov = provenance(a.command)
    out = {"provenance": prov, "settings": settings, "machine": machine, "targets": first["targets"],
           "repeats": a.repeats, "min_repeats_rule": MIN_REPEATS,
           "interleaving": "at each rate, every repeat: " + " then ".join(targets) + " on the same requests",
           "runs": rows, "ratios": ratios, "repeat_runs": raw}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")

    s = settings
    lines = provenance_lines(prov) + [
        f"- Dataset: {s['num_prompts']} prompts per run, prompt tokens mean {s['mean_prompt_tokens']:.1f}, output "
        f"tokens mean {s['mean_output_tokens']:.1f}, greedy, ignore_eos; new prompts in every run (seed + rate "
        f"index x repeats + repeat); max concurrency {s['max_concurrency'] or 'unlimited'}; SLOs TTFT <= "
        f"{s['slo_ttft_ms'] or float('inf'):g} ms, TPOT <= {s['slo_tpot_ms'] or float('inf'):g} ms; latencies in ms",
        f"- Load average: {machine.get('load_average_start')} at the start, {machine.get('load_average_end')} at the end",
        f"- Repeats: {a.repeats} per rate, the targets alternating ({' then '.join(targets)}, A B A B). Each cell: "
        "median [min–max] over the repeats (done / failed: totals). Ratios: median [min–max] of the per-repeat "
        f"ratios {targets[0]} / {targets[-1]}, \"tie\" when that range holds 1."
        + (f" **Below the rule**: COURSE.md asks for at least {MIN_REPEATS} repeats before a ratio is called a "
           "win, a loss or a tie." if a.repeats < MIN_REPEATS else ""),
        "",
        "| target | rate (req/s) | done | failed | " + " | ".join(c for c, _ in TABLE) + " |",
        "|---|---|---:|---:|" + "---:|" * len(TABLE)]
    for r in rows:
        lines.append(f"| {r['target']} | {r['rate']} | {r.get('completed')} | {r.get('failed')} | "
                     + " | ".join(cell(r["spread"][k], 2 if k in ("request_throughput", "goodput") else 1)
                                  if k in r["spread"] else "-" for _, k in TABLE) + " |")
    if ratios:
        lines += ["", "| rate (req/s) | ratio | " + " | ".join(c for c, _, _ in RATIOS) + " |",
                  "|---|---|" + "---:|" * len(RATIOS)]
        for r in ratios:
            lines.append(f"| {r['rate']} | {r['numerator']} / {r['denominator']} | "
                         + " | ".join(ratio_cell(r["spread"][n]) for _, n, _ in RATIOS) + " |")
        lines += ["", "Ratios are first target / other: > 1 is better for throughput and goodput, < 1 for "
                  "latencies. \"-\": no ratio (a zero or missing denominator in every repeat)."]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
