#!/usr/bin/env python3
"""The course's two real models side by side (issue 41; chapters 01, 02 and 07): SmolLM2-135M
(llama family: GQA, 3 KV heads of 64, every layer global) and Gemma 3 270M (gemma3: MQA, 1 KV head
of 256, a 512-key sliding window on 15 of its 18 layers).

  kv      chapter 01's sizing from each file's config (`lio info --json`): KV bytes per token and
          per sequence at 1K / 4K / 8K / 32K tokens, f32 elements, (a) every layer keeping every
          token, which is what LIO's paged pool holds today, and (b) windowed layers keeping only
          their last `window` tokens, what freeing the blocks that slide out would give (vLLM's
          sliding-window KV manager, llama.cpp's iSWA cache). Arithmetic, not a measurement.
  decode  chapter 02: batch-1 decode tok/s at contexts 1K / 4K / 8K (8,160: SmolLM2 holds 8,192; build/bin/bench_decode
          --prompt-tokens N --decode-tokens 32, one process per measurement, --repeats rounds with
          the models alternating; median [min-max]).
  window  chapter 07: sliding-window prefill at N = 4,096 and 8,192 in Gemma 3's attention shape,
          the flash kernel with the key tiles wholly outside the window skipped vs gathered and
          masked (build/bin/ch07_flash_attention window --json).

Writes bench/results/families_cpu.json and .md (command, commit, machine, date).
  .venv/bin/python bench/families/run.py [--repeats 3] [--threads 2]
"""
import json
import os
import statistics
import subprocess

from liobench import ROOT
from liobench.main import bench_main
from liobench.results_meta import provenance_lines


MODELS = [("SmolLM2-135M (llama, GQA)", "models/SmolLM2-135M-Instruct.Q4_1.gguf"),
          ("Gemma 3 270M (gemma3, MQA + window)", "models/gemma-3-270m-q4_k_m.gguf")]
KV_CONTEXTS = [1024, 4096, 8192, 32768]
DECODE_CONTEXTS = [1024, 4096, 8160]  # 8,160 + 32 decoded = SmolLM2's 8,192-token context


def run_json(cmd):
    return json.loads(subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout)


def kv_rows(a):
    rows = []
    for name, path in MODELS:
        info = run_json([os.path.join(a.bin, "lio"), "info", "--model", os.path.join(ROOT, path), "--json"])
        c = info["config"]
        per_layer_token = 2 * c["n_kv_heads"] * c["head_dim"] * 4  # K and V, f32
        n_windowed, w = info["windowed_layers"], c["sliding_window"]
        for n in KV_CONTEXTS:
            full = c["n_layers"] * n * per_layer_token
            freed = ((c["n_layers"] - n_windowed) * n + n_windowed * min(n, w if w > 0 else n)) * per_layer_token
            rows.append({"model": name, "architecture": info["architecture"], "n_layers": c["n_layers"],
                         "n_kv_heads": c["n_kv_heads"], "head_dim": c["head_dim"], "windowed_layers": n_windowed,
                         "window": w, "context": n, "kv_bytes_per_token": info["kv_bytes_per_token_f32"],
                         "kv_bytes_all_tokens": full, "kv_bytes_window_freed": freed})
    return rows


def decode_rows(a):
    samples = {}
    for rep in range(a.repeats):
        for n in DECODE_CONTEXTS:
            for name, path in MODELS:  # the models alternate within each round
                j = run_json([os.path.join(a.bin, "bench_decode"), "--model", os.path.join(ROOT, path), "--json",
                              "--prompt-tokens", str(n), "--decode-tokens", "32", "--repeats", "1",
                              "--threads", str(a.threads), "--bandwidth-gib", "0.25"])
                samples.setdefault((name, n), []).append(j["decode_tokens_per_s"])
                print(f"round {rep + 1}: {name} at {n}: {j['decode_tokens_per_s']:.1f} tok/s", flush=True)
    return [{"model": name, "context": n, "decode_tok_s": statistics.median(v), "min": min(v), "max": max(v),
             "samples": v} for (name, n), v in samples.items()]


def measure(a):
    """KV sizing from each file's config, the window prefill and the decode rounds."""
    kv = kv_rows(a)
    window = run_json([os.path.join(a.bin, "ch07_flash_attention"), "--threads", str(a.threads), "window", "--json",
                       "--repeats", "5"])
    return {"kv": kv, "decode": decode_rows(a), "window": window}


def markdown(res):
    """The results file's Markdown, from the result as written."""
    kv, decode, window = res["kv"], res["decode"], res["window"]
    lines = ["# Two model families on the CPU: SmolLM2-135M (GQA) and Gemma 3 270M (MQA + sliding window)", ""]
    lines += provenance_lines(res["provenance"])
    lines += [f"- Threads: {res['threads']}; decode: bench_decode, 32 tokens after an N-token prompt, {res['repeats']} rounds "
              "with the models alternating, median [min-max]", "",
              "## KV cache per sequence (f32; chapter 01's arithmetic from each file's config)", "",
              "| model | layers (windowed) | KV heads x dim | KV bytes / token | context | every token kept | "
              "windowed layers keep their window |", "|---|---|---|---:|---:|---:|---:|"]
    for r in kv:
        lines.append(f"| {r['model']} | {r['n_layers']} ({r['windowed_layers']}) | {r['n_kv_heads']} x {r['head_dim']} | "
                     f"{r['kv_bytes_per_token']:,} | {r['context']:,} | {r['kv_bytes_all_tokens'] / 2**20:,.1f} MiB | "
                     f"{r['kv_bytes_window_freed'] / 2**20:,.1f} MiB |")
    lines += ["", "## Decode tok/s at context N (chapter 02)", "", "| model | N | decode tok/s |", "|---|---:|---:|"]
    for r in decode:
        lines.append(f"| {r['model']} | {r['context']:,} | {r['decode_tok_s']:.1f} [{r['min']:.1f}-{r['max']:.1f}] |")
    lines += ["", f"## Sliding-window prefill, window {window['prefill'][0]['window']} ({window['n_heads']} heads, "
              f"{window['n_kv_heads']} KV head of {window['head_dim']}; chapter 07)", "",
              "| N | tiles skipped: ms | gathered and masked: ms | speedup | key tiles gathered (skip / mask) | "
              "full causal ms |", "|---:|---:|---:|---:|---:|---:|"]
    for r in window["prefill"]:
        lines.append(f"| {r['n']:,} | {r['skip_ms']['median']:.1f} | {r['mask_ms']['median']:.1f} | "
                     f"{r['skip_speedup']:.2f}x | {r['tiles_gathered_skip']:,} / {r['tiles_gathered_mask']:,} | "
                     f"{r['full_causal_ms']['median']:.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    bench_main(__doc__, "families_cpu", 3, measure, markdown,
               needs=[(path, "run scripts/fetch_model.sh all") for _, path in MODELS])
