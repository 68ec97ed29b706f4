#!/usr/bin/env python3
"""Aggregates bench/06_speculative/serve.sh's bench_serve runs (targets "spec" and "plain"):
per metric the median and min-max over the runs, and the per-run ratio spec / plain with "tie"
where its min-max holds 1. Writes OUT.json and OUT.md. Standard library only."""
import argparse
import json
import os
import statistics
import sys

from liobench import flags
from liobench.results_meta import local_path_free, provenance, provenance_lines


METRICS = ["tpot_p50_ms", "tpot_p99_ms", "ttft_p50_ms", "itl_p50_ms", "e2e_p50_ms", "output_throughput"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    flags.add_out(ap)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--slots", required=True)
    ap.add_argument("--metrics", default="")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    per_run = []
    for path in a.runs:
        d = json.load(open(path))
        rows = {r["target"]: {k: v for k, v in r.items() if k != "per_request"} for r in d["runs"]}
        per_run.append(rows)
    table = []
    for m in METRICS:
        spec = [r["spec"][m] for r in per_run]
        plain = [r["plain"][m] for r in per_run]
        ratios = [s / p for s, p in zip(spec, plain)]
        table.append({"metric": m, "spec": statistics.median(spec), "spec_min": min(spec), "spec_max": max(spec),
                      "plain": statistics.median(plain), "plain_min": min(plain), "plain_max": max(plain),
                      "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
                      "tie": min(ratios) <= 1.0 <= max(ratios)})
    counters = {}
    for line in a.metrics.splitlines():
        name, _, value = line.rpartition(" ")
        if name:
            counters[name.strip()] = float(value)
    settings = json.load(open(a.runs[0]))["settings"]
    cmd = f"bench/06_speculative/serve.sh --repeats {len(a.runs)} --spec \"{a.spec}\""
    out = {"provenance": provenance(command=cmd), "spec": a.spec, "model": os.path.basename(a.model),
           "max_num_seqs": int(a.slots), "bench_serve": {k: settings.get(k) for k in
                                                          ("num_prompts", "input_len", "output_len", "mean_prompt_tokens", "mean_output_tokens")},
           "metrics": table, "spec_counters_at_end": counters, "runs": per_run}
    text = local_path_free(json.dumps(out, indent=1))
    with open(a.out + ".json", "w") as f:
        f.write(text + "\n")
    out = json.loads(text)
    md = ["# Chapter 06: lio-server with and without speculative decoding (CPU, low load)", ""]
    md += provenance_lines(out["provenance"]) + ["", f"Model `{out['model']}`, `--max-num-seqs {a.slots}`; speculation: "
                                                 f"`--spec-method {a.spec}`; bench_serve {out['bench_serve']}; "
                                                 f"{len(a.runs)} runs, each sending the same requests to both servers "
                                                 "(spec then plain); median (min-max).", "",
                                                 "| metric | with speculation | without | ratio (min-max) |",
                                                 "|---|---:|---:|---:|"]
    for r in table:
        md.append(f"| {r['metric']} | {r['spec']:.1f} ({r['spec_min']:.1f}-{r['spec_max']:.1f}) | {r['plain']:.1f} "
                  f"({r['plain_min']:.1f}-{r['plain_max']:.1f}) | {r['ratio']:.2f}x ({r['ratio_min']:.2f}-"
                  f"{r['ratio_max']:.2f}){' tie' if r['tie'] else ''} |")
    if counters:
        drafted = counters.get("lio:spec_decode_num_draft_tokens_total", 0)
        accepted = counters.get("lio:spec_decode_num_accepted_tokens_total", 0)
        md += ["", f"Speculating server at the end: {drafted:.0f} drafted, {accepted:.0f} accepted "
                   f"(acceptance rate {accepted / drafted if drafted else 0:.3f})."]
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"wrote {a.out}.json, .md", file=sys.stderr)


if __name__ == "__main__":
    main()
