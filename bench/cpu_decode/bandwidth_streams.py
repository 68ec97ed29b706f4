#!/usr/bin/env python3
"""What the read-bandwidth probe measures, against what a decode step reads (issue 42, item 8:
docs/09's closing table showed the f32 baseline reading weights faster than the probe of the
same run).

bench_decode's probe sums a 1 GiB buffer on every thread. Each thread reads its share as S
sequential streams side by side (--bandwidth-streams S; S = 1 was the probe until 2026-11-27).
A batch-1 decode step reads every weight once; LIO's f32 GEMV reads several weight rows at once.
Per round, for S = 1, 2, 4, 8: one bench_decode run on the F32 SmolLM2 file, whose decode
achieved GB/s (weight bytes x tok/s) is measured alongside; --repeats rounds, the S values
alternating; medians [min-max].

Writes bench/results/read_bandwidth_streams_cpu.json and .md (command, commit, machine, date).
  .venv/bin/python bench/cpu_decode/bandwidth_streams.py [--repeats 5] [--threads 2]
"""
import json
import os
import subprocess

from liobench import ROOT
from liobench.main import bench_main
from liobench.results_meta import provenance_lines
from liobench.stats import spread


MODEL = "models/SmolLM2-135M-Instruct.F32.gguf"
STREAMS = [1, 2, 4, 8]


def markdown(r):
    """The results file's Markdown, from the result as written."""
    dec = r["f32_decode_gbs"]
    lines = ["# The read-bandwidth probe vs a decode step's weight reads (CPU)", ""]
    lines += provenance_lines(r["provenance"])
    lines += [f"- Probe: bench_decode's, a 1 GiB buffer summed by {r['threads']} threads, each reading its share as "
              "S sequential streams side by side; decode: the same runs' batch-1 decode of "
              f"`{r['model']}` (weight bytes x tok/s); {r['repeats']} rounds, S alternating; median [min-max]", "",
              "| streams per thread | probe GB/s | f32 decode reads, GB/s | decode / probe |", "|---:|---:|---:|---:|"]
    for row in r["rows"]:
        p = row["probe_gbs"]
        lines.append(f"| {row['streams']} | {p['median']:.1f} [{p['min']:.1f}-{p['max']:.1f}] | "
                     f"{dec['median']:.1f} [{dec['min']:.1f}-{dec['max']:.1f}] | {dec['median'] / p['median']:.2f} |")
    return "\n".join(lines) + "\n"


def measure(a):
    """The probe's GB/s at each stream count and the F32 decode's, --repeats interleaved rounds."""
    probe, decode = {s: [] for s in STREAMS}, []
    for rep in range(a.repeats):
        for s in STREAMS:
            out = subprocess.run([os.path.join(a.bin, "bench_decode"), "--model", os.path.join(ROOT, MODEL), "--json",
                                  "--prompt-tokens", "16", "--decode-tokens", "32", "--repeats", "1",
                                  "--threads", str(a.threads), "--bandwidth-streams", str(s)],
                                 check=True, stdout=subprocess.PIPE, text=True).stdout
            j = json.loads(out)
            probe[s].append(j["read_bandwidth_gbs"])
            decode.append(j["decode_achieved_gbs"])
            print(f"round {rep + 1}: streams {s}: probe {j['read_bandwidth_gbs']:.1f} GB/s, "
                  f"f32 decode reads {j['decode_achieved_gbs']:.1f} GB/s", flush=True)
    rows = [{"streams": s, "probe_gbs": spread(probe[s])} for s in STREAMS]
    return {"model": MODEL, "rows": rows, "f32_decode_gbs": spread(decode)}


if __name__ == "__main__":
    bench_main(__doc__, "read_bandwidth_streams_cpu", 5, measure, markdown,
               needs=[(MODEL, "run scripts/setup.sh (it writes the F32 copy)")])
