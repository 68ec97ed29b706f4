#!/usr/bin/env python3
"""The draft's cost ratio c of chapter 06's speedup formula, for LIO and for llama.cpp (issue 42,
item 8: lesson 06 said the two engines' draft results differ by c without measuring llama.cpp's).

c = (time of one draft decode step) / (time of one target decode step) = target tok/s / draft tok/s
at batch 1, for the pair lesson 06 runs: target SmolLM2-135M-Instruct F32, draft its shipped Q4_1
file. Each engine's plain decode: LIO `bench_decode` (decode tok/s after a 128-token prompt),
llama.cpp `llama-bench -p 0 -n 64 -d 128` (tg at depth 128). Per round the four runs alternate
(LIO target, llama.cpp target, LIO draft, llama.cpp draft); --repeats rounds; tok/s median
[min-max]; c is the median of the per-round ratios with their range.

Writes bench/results/06_speculative_draft_cost_cpu.json and .md (command, commit, machine, date).
  .venv/bin/python bench/06_speculative/draft_cost.py [--repeats 5] [--threads 2]
"""
import json
import os
import subprocess

from liobench import ROOT
from liobench.main import bench_main
from liobench.results_meta import provenance_lines
from liobench.stats import spread


LLAMA = os.path.join(os.environ.get("LLAMA_BUILD_DIR", os.path.join(ROOT, "build-llama")), "bin")
MODELS = {"target": "models/SmolLM2-135M-Instruct.F32.gguf", "draft": "models/SmolLM2-135M-Instruct.Q4_1.gguf"}


def run(cmd):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout


def lio_tg(a, model):
    j = json.loads(run([os.path.join(a.bin, "bench_decode"), "--model", os.path.join(ROOT, model), "--json",
                        "--prompt-tokens", "128", "--decode-tokens", "64", "--repeats", "1", "--threads",
                        str(a.threads), "--bandwidth-gib", "0.25"]))
    return j["decode_tokens_per_s"]


def llama_tg(a, model):
    j = json.loads(run([os.path.join(LLAMA, "llama-bench"), "-m", os.path.join(ROOT, model), "-p", "0", "-n", "64",
                        "-d", "128", "-t", str(a.threads), "-r", "1", "-o", "json"]))
    return j[0]["avg_ts"]


def markdown(r):
    """The results file's Markdown, from the result as written."""
    m = r["models"]
    lines = ["# The draft's cost ratio c (chapter 06): LIO vs llama.cpp, CPU", ""]
    lines += provenance_lines(r["provenance"])
    lines += [f"- Target `{m['target']}`, draft `{m['draft']}`; batch-1 decode, 64 tokens after 128 "
              f"(LIO bench_decode, llama.cpp llama-bench -d 128), {r['threads']} threads; {r['repeats']} rounds, "
              "the four runs alternating; tok/s median [min-max]; c = target tok/s / draft tok/s per round, "
              "median [min-max]", "",
              "| engine | target (F32) tok/s | draft (Q4_1) tok/s | c |", "|---|---:|---:|---:|"]
    f = lambda s: f"{s['median']:.1f} [{s['min']:.1f}-{s['max']:.1f}]"
    for row in r["rows"]:
        lines.append(f"| {row['engine']} | {f(row['target_tok_s'])} | {f(row['draft_tok_s'])} | "
                     f"{row['c']['median']:.2f} [{row['c']['min']:.2f}-{row['c']['max']:.2f}] |")
    return "\n".join(lines) + "\n"


def build_llama_tools(a):
    """llama-bench, built once (bench/batched/build_llama_tools.sh)."""
    if not os.path.exists(os.path.join(LLAMA, "llama-bench")):
        subprocess.run(["bash", os.path.join(ROOT, "bench", "batched", "build_llama_tools.sh")], check=True)


def measure(a):
    """Target and draft tok/s of each engine, --repeats interleaved rounds, and their ratio c."""
    tok = {(e, r): [] for e in ("LIO", "llama.cpp") for r in MODELS}
    for rep in range(a.repeats):
        for role, model in MODELS.items():
            for engine, fn in (("LIO", lio_tg), ("llama.cpp", llama_tg)):
                t = fn(a, model)
                tok[(engine, role)].append(t)
                print(f"round {rep + 1}: {engine} {role}: {t:.1f} tok/s", flush=True)
    rows = []
    for engine in ("LIO", "llama.cpp"):
        cs = [t / d for t, d in zip(tok[(engine, "target")], tok[(engine, "draft")])]
        rows.append({"engine": engine, "target_tok_s": spread(tok[(engine, "target")]),
                     "draft_tok_s": spread(tok[(engine, "draft")]), "c": spread(cs)})
    return {"models": MODELS, "rows": rows}


if __name__ == "__main__":
    bench_main(__doc__, "06_speculative_draft_cost_cpu", 5, measure, markdown, prepare=build_llama_tools)
