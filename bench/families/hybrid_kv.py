#!/usr/bin/env python3
"""Sliding-window block freeing, measured (issue 41; chapter 04): Gemma 3 270M served by `lio batch`
with the hybrid KV cache (KV cache groups: the 15 windowed layers give back the blocks that slide
out of their 512-token window, lio/kv_cache_coordinator.h) and with --disable-hybrid-kv-cache-manager
(every layer keeps every block, as before).

For one sequence of N prompt tokens + 64 generated (N = 1,024 / 4,096 / 8,192; random token ids,
greedy; the prompt prefilled in chunks of 512 tokens), the engine's own counters: the most KV blocks held at once x the bytes of a block = the
peak KV memory of the sequence (f32 elements), and the decode tok/s `lio batch` reports. The two
configurations alternate within each round, --repeats rounds; memory is the same every round
(the schedule is deterministic), speed is median [min-max]. Also checks that both give the same
tokens.

Writes bench/results/hybrid_kv_cpu.json and .md (command, commit, machine, date).
  .venv/bin/python bench/families/hybrid_kv.py [--repeats 3] [--threads 2]
"""
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

from liobench import ROOT
from liobench.main import bench_main
from liobench.results_meta import provenance_lines


MODEL = "models/gemma-3-270m-q4_k_m.gguf"
CONTEXTS = [1024, 4096, 8192]
GENERATED = 64
CHUNK = 512  # prefill chunk (--max-num-batched-tokens): a windowed group holds its window + one chunk at most
CONFIGS = [("hybrid (windowed blocks freed)", []), ("one group (every block kept)", ["--disable-hybrid-kv-cache-manager"])]


def run(a, n, extra, tmp):
    prompts = os.path.join(tmp, f"p{n}.jsonl")
    rng = random.Random(n)
    with open(prompts, "w") as f:
        f.write(json.dumps({"prompt_token_ids": [rng.randrange(1000, 200000) for _ in range(n)]}) + "\n")
    out, summary = os.path.join(tmp, "out.jsonl"), os.path.join(tmp, "summary.json")
    cmd = [os.path.join(a.bin, "lio"), "batch", "--model", os.path.join(ROOT, MODEL), "--prompts", prompts,
           "--out", out, "--summary", summary, "--max-tokens", str(GENERATED), "--threads", str(a.threads),
           "--kv-cache-mib", "1024", "--max-num-batched-tokens", str(CHUNK)] + extra
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(summary) as f:
        s = json.load(f)
    with open(out) as f:
        tokens = json.loads(f.readline())["token_ids"]
    return s, tokens


def markdown(res):
    """The results file's Markdown, from the result as written."""
    lines = ["# Sliding-window block freeing on Gemma 3 270M (CPU; chapter 04)", ""]
    lines += provenance_lines(res["provenance"])
    lines += [f"- Model: `{res['model']}`; one sequence, N random prompt tokens + {res['generated']} generated "
              f"(greedy), `lio batch --kv-cache-mib 1024 --max-num-batched-tokens {res['chunk']}`, {res['threads']} "
              f"threads; {res['repeats']} rounds with the two configurations alternating; tok/s median [min-max]", "",
              "| N | KV cache | groups | block bytes | peak blocks held | peak KV memory | decode tok/s | "
              "same tokens |", "|---:|---|---:|---:|---:|---:|---:|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['context']:,} | {r['config']} | {r['kv_cache_groups']} | {r['kv_block_bytes']:,} | "
                     f"{r['peak_kv_blocks_used']:,} | {r['peak_kv_bytes_used'] / 2**20:,.1f} MiB | "
                     f"{r['decode_tok_s']:.1f} [{r['min']:.1f}-{r['max']:.1f}] | "
                     f"{'yes' if r['same_tokens'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def measure(a):
    """Peak KV memory and decode tok/s of each configuration at each context, --repeats rounds."""
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.repeats):
            for n in CONTEXTS:
                for name, extra in CONFIGS:
                    s, tokens = run(a, n, extra, tmp)
                    r = rows.setdefault((n, name), {"context": n, "config": name, "tok_s": [], "tokens": tokens})
                    if r["tokens"] != tokens:
                        sys.exit(f"{name} at {n}: tokens differ between rounds")
                    r.update({"kv_cache_groups": s["kv_cache_groups"], "kv_block_bytes": s["kv_block_bytes"],
                              "peak_kv_blocks_used": s["peak_kv_blocks_used"],
                              "peak_kv_bytes_used": s["peak_kv_bytes_used"]})
                    r["tok_s"].append(s["decode_tok_per_s"])
                    print(f"round {rep + 1}: N={n} {name}: {s['peak_kv_bytes_used'] / 2**20:.1f} MiB, "
                          f"{s['decode_tok_per_s']:.1f} tok/s", flush=True)
    out_rows = []
    for n in CONTEXTS:
        same = rows[(n, CONFIGS[0][0])]["tokens"] == rows[(n, CONFIGS[1][0])]["tokens"]
        for name, _ in CONFIGS:
            r = rows[(n, name)]
            del r["tokens"]
            v = r["tok_s"]
            out_rows.append({**r, "decode_tok_s": statistics.median(v), "min": min(v), "max": max(v),
                             "same_tokens": same})
    return {"model": MODEL, "generated": GENERATED, "chunk": CHUNK, "rows": out_rows}


if __name__ == "__main__":
    bench_main(__doc__, "hybrid_kv_cpu", 3, measure, markdown, needs=[(MODEL, "run scripts/fetch_model.sh all")])
