#!/usr/bin/env python3
"""The closing table: lecture note 003's optimisation order measured cumulatively on one workload
on this engine (COURSE.md, "Performance method").

    .venv/bin/python bench/capstone/run.py [--repeats 5] [--requests 16] [--max-tokens 64]
                                           [--bin build/bin] [--quick]

Lecture note 003 (section 10.1, "추천 최적화 순서") orders the work: 1 BF16/FP16, 2 FlashAttention 2,
3 serve with vLLM (paged KV + continuous batching), 4 AWQ/GPTQ 4-bit, 5 speculative decoding,
6 multi-GPU tensor parallelism. Each step here adds that chapter's switch of `lio batch` to
everything before it:

  0 baseline      F32 weights (--dtype f32), f32 KV cache, the naive attention kernels
                  (--attention-backend naive), one request at a time (--max-num-seqs 1): the
                  lecture's starting point, a model.generate() loop
  1 BF16          --dtype bf16 --kv-cache-dtype f16 (16-bit weights and KV, chapters 01 and 03)
  2 Flash         --attention-backend flash (chapter 07)
  3 paged batch   --max-num-seqs 64 --scheduling continuous (chapters 04 and 05; the KV cache
                  of `lio batch` is always paged, so this step turns the batching on)
  4 AWQ           the AWQ 4-bit file (--method awq --bits 4 --asymmetric, Q4_1 blocks, made
                  once by `lio quantize` into build/capstone/, not committed), --dtype auto
  5 speculative   --spec-method ngram --num-speculative-tokens 4 (chapter 06; prompt lookup:
                  the course has one model size, so there is no smaller draft model)
  6 TP            scripts/mpirun.sh -n 3 ... --tensor-parallel-size 3 (chapter 08; the model's
                  9 heads and 3 KV heads split 3 ways; 3 ranks x 1 thread)

The workload: --requests chat requests (half "rewrite this passage" over a paragraph of
chapters/02_gqa_mla/eval_text.txt, half a short story on a fixed topic), all queued at once,
--max-tokens output tokens each (greedy, EOS ignored, so every step does the same work), the
model SmolLM2-135M-Instruct. Each repeat runs every step once, in order (round-robin, so drift on
a shared machine hits every step); a step's number is the median over repeats with the min-max,
and its speedups are the medians of per-repeat ratios (to the baseline and to the previous step
of the same repeat). A step that fails (a switch this build or machine lacks) is recorded with
its reason, and the next step builds on the last one that ran.

Writes bench/results/09_closing_cpu.{json,md,png} (docs/09_server.md renders its table from the
JSON). Nothing here is a test.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

from liobench import ROOT, flags
from liobench.results_meta import local_path_free, provenance, provenance_lines, read_bandwidth_gbs, write_results


F32 = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.F32.gguf")
AWQ = os.path.join(ROOT, "build", "capstone", "SmolLM2-135M-Instruct.Q4_1-awq.gguf")
CALIB = os.path.join(ROOT, "chapters", "02_gqa_mla", "calib_text.txt")
PASSAGES = os.path.join(ROOT, "chapters", "02_gqa_mla", "eval_text.txt")
MPIRUN = os.path.join(ROOT, "scripts", "mpirun.sh")
TOPICS = ("a robot who learns to paint", "a lighthouse keeper and a storm", "a cat who runs a bakery",
          "the last train of the night", "a child who finds a map", "a city under the sea",
          "a clock that runs backwards", "two friends climbing a mountain")

# (key, title, what lecture note 003 says of it (section 10.1's checklist), flags added)
STEPS = [
    ("baseline", "baseline", "FP32, eager attention, one request at a time (the lecture's starting point)",
     ["--dtype", "f32", "--kv-cache-dtype", "f32", "--attention-backend", "naive", "--max-num-seqs", "1",
      "--activations", "f32"]),  # lio batch's default is int8 on 4-bit weights: the AWQ step alone, please
    ("bf16", "BF16", "1. BF16/FP16: half the memory, faster (no number given)",
     ["--dtype", "bf16", "--kv-cache-dtype", "f16"]),
    ("flash", "FlashAttention", "2. FlashAttention 2: attention 2-4x faster, less memory",
     ["--attention-backend", "flash"]),
    ("paged_batching", "paged batching", "3. vLLM (PagedAttention + continuous batching): throughput 2-5x",
     ["--max-num-seqs", "64", "--scheduling", "continuous"]),
    ("awq", "AWQ 4-bit", "4. AWQ 4-bit: 4x less memory, 1.5-2x faster",
     ["--model", "AWQ", "--dtype", "auto"]),
    ("speculative", "speculative", "5. speculative decoding: 2-3x faster (latency)",
     ["--spec-method", "ngram", "--num-speculative-tokens", "4"]),
    ("tp", "TP 3", "6. tensor parallelism: throughput scales linearly with GPUs",
     ["--tensor-parallel-size", "3", "--threads", "1"]),
]
SUMMARY_KEYS = ("output_tok_per_s", "total_s", "output_tokens", "decode_tok_per_s", "n_decode_steps", "decode_s",
                "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "median_e2e_ms", "acceptance_rate",
                "n_steps", "max_running")
LATENCY_KEYS = ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "median_e2e_ms")


def workload(n_requests):
    """The requests: even ones rewrite a paragraph of eval_text.txt (grounded: the output copies
    the prompt, as n-gram lookup likes), odd ones write a story (free-form)."""
    with open(PASSAGES, encoding="utf-8") as f:
        paragraphs = [p.strip().replace("\n", " ") for p in f.read().split("\n\n") if len(p.split()) >= 30]
    reqs = []
    for i in range(n_requests):
        if i % 2 == 0:
            text = ("Rewrite the following passage in plain modern English, keeping every event:\n\n"
                    + paragraphs[(i // 2) % len(paragraphs)])
        else:
            text = f"Write a short story about {TOPICS[(i // 2) % len(TOPICS)]}."
        reqs.append({"messages": [{"role": "user", "content": text}]})
    return reqs


def merged(flag_lists):
    """Flags of several steps, a later value of the same option replacing an earlier one."""
    out = {}
    for flags in flag_lists:
        for k, v in zip(flags[::2], flags[1::2]):
            out[k] = v
    return [x for kv in out.items() for x in kv]


def commands(args, prompts, summary):
    """[(key, argv, display argv)] per step, each with every earlier step's flags."""
    lio = os.path.join(args.bin, "lio")
    out = []
    for i, (key, *_rest) in enumerate(STEPS):
        flags = merged([["--model", F32, "--threads", str(args.threads)]] + [s[3] for s in STEPS[:i + 1]])
        flags = [AWQ if f == "AWQ" else f for f in flags]
        argv = [lio, "batch", "--prompts", prompts, "--out", os.devnull, "--summary", summary,
                "--max-tokens", str(args.max_tokens), "--ignore-eos", "--temperature", "0"] + flags
        if key == "tp":
            argv = [MPIRUN, "-n", "3", "-x", "OMP_WAIT_POLICY=passive"] + argv
        shown = [("build/bin/lio" if a == lio else "PROMPTS.jsonl" if a == prompts else
                  "SUMMARY.json" if a == summary else a) for a in argv]
        out.append((key, argv, [local_path_free(a) for a in shown]))
    return out


def run_step(argv, summary, timeout_s):
    """One `lio batch` run -> (summary subset, None) or (None, reason)."""
    if os.path.exists(summary):
        os.remove(summary)
    print("+ " + local_path_free(" ".join(argv)), file=sys.stderr, flush=True)
    t0 = time.monotonic()
    try:
        r = subprocess.run(argv, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, f"did not finish in {timeout_s} s"
    wall_s = time.monotonic() - t0
    if r.returncode != 0 or not os.path.exists(summary):
        tail = [line for line in r.stderr.strip().splitlines() if line.strip()][-3:]
        return None, local_path_free(f"exit {r.returncode}: " + " | ".join(tail))
    with open(summary) as f:
        s = json.load(f)
    out = {k: s.get(k) for k in SUMMARY_KEYS}
    out["process_wall_s"] = wall_s   # with the model load (and the BF16 conversion), unlike total_s
    return out, None


def spread(xs):
    xs = [x for x in xs if x is not None]
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)} if xs else None


def ensure_awq(args):
    """Makes the AWQ 4-bit file once (minutes on 2 cores); later runs reuse it."""
    if os.path.exists(AWQ):
        return None
    os.makedirs(os.path.dirname(AWQ), exist_ok=True)
    argv = [os.path.join(args.bin, "lio"), "quantize", "--model", F32, "--out", AWQ, "--method", "awq", "--bits", "4",
            "--asymmetric", "--calib", CALIB]
    print("+ " + local_path_free(" ".join(argv)), file=sys.stderr, flush=True)
    t0 = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def weight_bytes(args, model, dtype):
    """Bytes of weights in memory (`lio info --json`), for the achieved-bandwidth column."""
    r = subprocess.run([os.path.join(args.bin, "lio"), "info", "--model", model, "--dtype", dtype, "--json"],
                       text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        return json.loads(r.stdout)["weight_bytes"] if r.returncode == 0 else None
    except (ValueError, KeyError):
        return None


def measure(args):
    reqs = workload(args.requests)
    with tempfile.TemporaryDirectory() as tmp:
        prompts, summary = os.path.join(tmp, "prompts.jsonl"), os.path.join(tmp, "summary.json")
        with open(prompts, "w") as f:
            for r in reqs:
                f.write(json.dumps(r) + "\n")
        cmds = commands(args, prompts, summary)
        runs = {key: [] for key, *_ in cmds}
        failed = {}
        for rep in range(args.repeats):
            for key, argv, _ in cmds:
                if key in failed:
                    continue
                s, reason = run_step(argv, summary, args.timeout)
                if s is None:
                    failed[key] = reason
                    print(f"  {key}: {reason}", file=sys.stderr)
                else:
                    s["repeat"] = rep
                    runs[key].append(s)
    return cmds, runs, failed


def aggregate(args, cmds, runs, failed):
    f32_bytes = weight_bytes(args, F32, "f32")
    bytes_of = {"baseline": f32_bytes, "bf16": weight_bytes(args, F32, "bf16"), "awq": weight_bytes(args, AWQ, "auto")}
    steps, prev_ran, current_bytes = [], None, f32_bytes
    base = {r["repeat"]: r["output_tok_per_s"] for r in runs["baseline"]}
    for (key, title, claim, added), (_, _, shown) in zip(STEPS, cmds):
        current_bytes = bytes_of.get(key, current_bytes)
        row = {"key": key, "title": title, "lecture_claim": claim,
               "switches_added": " ".join("<AWQ Q4_1 file>" if a == "AWQ" else a for a in added),
               "command": " ".join(shlex.quote(a) for a in shown), "ran": key not in failed,
               "reason": failed.get(key), "weight_mib": current_bytes / 2**20 if current_bytes else None}
        rs = runs[key]
        if key in failed and not rs:
            steps.append(row)
            continue
        by_rep = {r["repeat"]: r for r in rs}
        row["runs"] = rs
        row["output_tok_per_s"] = spread([r["output_tok_per_s"] for r in rs])
        for k in LATENCY_KEYS:
            row[k] = spread([r[k] for r in rs])
        row["acceptance_rate"] = spread([r["acceptance_rate"] for r in rs])
        # Weight bytes read per second in decode-only steps: each step reads every weight once.
        row["decode_weight_gb_s"] = spread([current_bytes * r["n_decode_steps"] / r["decode_s"] / 1e9
                                           for r in rs if current_bytes and r["decode_s"]])
        row["vs_baseline"] = spread([by_rep[k]["output_tok_per_s"] / base[k] for k in by_rep if k in base])
        if prev_ran is not None:
            prev = {r["repeat"]: r["output_tok_per_s"] for r in runs[prev_ran]}
            row["vs_previous"] = spread([by_rep[k]["output_tok_per_s"] / prev[k] for k in by_rep if k in prev])
            row["previous"] = prev_ran
        prev_ran = key
        steps.append(row)
    return steps


def markdown(result):
    w = result["workload"]
    lines = ["# The closing table: lecture note 003's order, cumulatively, on one workload (CPU)", ""]
    lines += provenance_lines(result["provenance"]) + [""]
    lines += [f"Workload: {w['requests']} chat requests ({w['description']}), all queued at once, {w['max_tokens']} "
              f"output tokens each (greedy, EOS ignored); SmolLM2-135M-Instruct; {w['threads']} threads. "
              f"{result['repeats']} repeats, steps interleaved; median [min-max] over repeats; speedups are "
              "medians of per-repeat ratios. Decode weight GB/s = weight bytes in memory x decode steps/s "
              "(each step reads every weight once); the machine's read bandwidth, measured in the same run "
              "(bench_decode's probe): " + (f"{result['read_bandwidth_gbs']:.1f} GB/s." if result.get("read_bandwidth_gbs")
                                            else "not measured (no bench_decode)."), ""]
    if result.get("quick"):
        lines += ["**A smoke run** (`--quick`: fewer requests and repeats, on a shared machine): it shows the "
                  "script works; its numbers are not the chapter's.", ""]
    lines += ["| step | switches added | output tok/s | vs baseline | vs previous | TTFT p50 / p99 (ms) | "
              "TPOT p50 / p99 (ms) | e2e p50 (ms) | decode weight GB/s |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for i, s in enumerate(result["steps"]):
        name = f"{i} {s['title']}"
        if "output_tok_per_s" not in s:
            lines.append(f"| {name} | `{s['switches_added']}` | not run: {s['reason']} | | | | | | |")
            continue
        t = s["output_tok_per_s"]
        vb, vp = s["vs_baseline"], s.get("vs_previous")
        vp_text = f"{vp['median']:.2f}x" if vp else ""
        gb = s.get("decode_weight_gb_s")
        lines.append(
            f"| {name} | `{s['switches_added']}` | {t['median']:.1f} [{t['min']:.1f}-{t['max']:.1f}] | "
            f"{vb['median']:.2f}x | {vp_text} | "
            f"{s['median_ttft_ms']['median']:.0f} / {s['p99_ttft_ms']['median']:.0f} | "
            f"{s['median_tpot_ms']['median']:.1f} / {s['p99_tpot_ms']['median']:.1f} | "
            f"{s['median_e2e_ms']['median']:.0f} | "
            f"{format(gb['median'], '.1f') if gb else ''} |")
    lines += ["", "What lecture note 003 (section 10.1) says of each step, and the command each row ran:", ""]
    for i, s in enumerate(result["steps"]):
        extra = "" if s["ran"] else f" (failed: {s['reason']})"
        lines.append(f"{i}. **{s['title']}**: {s['lecture_claim']}{extra}. `{s['command']}`")
    return "\n".join(lines) + "\n"


def plot(result, json_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from liobench.plot_util import save_beside

    ran = [s for s in result["steps"] if "output_tok_per_s" in s]
    labels = [f"{result['steps'].index(s)} {s['title']}" for s in ran]
    xs = range(len(ran))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    ax = axes[0]
    t = [s["output_tok_per_s"] for s in ran]
    bars = ax.bar(xs, [x["median"] for x in t], color="C0")
    ax.errorbar(xs, [x["median"] for x in t], yerr=[[x["median"] - x["min"] for x in t], [x["max"] - x["median"] for x in t]],
                fmt="none", ecolor="black", capsize=3, elinewidth=0.8)
    for b, s in zip(bars, ran):
        ax.annotate(f"{s['vs_baseline']['median']:.2f}x", (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center", va="bottom", fontsize=8, xytext=(0, 3), textcoords="offset points")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("output tok/s (median, min-max)")
    ax.set_title("throughput after each step (x baseline)", fontsize=10)
    ax = axes[1]
    for key, label, fmt in (("median_ttft_ms", "TTFT p50", "o-"), ("p99_ttft_ms", "TTFT p99", "o:"),
                            ("median_tpot_ms", "TPOT p50", "s-"), ("p99_tpot_ms", "TPOT p99", "s:"),
                            ("median_e2e_ms", "e2e p50", "^-")):
        v = [s[key] for s in ran]
        ax.errorbar(xs, [x["median"] for x in v], yerr=[[x["median"] - x["min"] for x in v],
                                                        [x["max"] - x["median"] for x in v]],
                    fmt=fmt, capsize=2, label=label, ms=4)
    ax.set_yscale("log")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("ms (median over repeats, log)")
    w = result["workload"]
    ax.set_title(f"latency after each step ({w['requests']} requests at once, {w['max_tokens']} tokens each)",
                 fontsize=10)
    ax.legend(fontsize=8)
    save_beside(fig, json_path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    flags.add_repeats(ap, 5)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2, help="CPU threads of a one-process step (TP: 1 per rank)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds one run may take before the step is marked failed")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"),
                    help="where lio is (default: build/bin; another checkout's build of the same commit works)")
    ap.add_argument("--quick", action="store_true", help="8 requests, 32 tokens, 2 repeats: a smoke run")
    flags.add_out(ap, "09_closing_cpu")
    args = ap.parse_args()
    if args.quick:
        args.requests, args.max_tokens, args.repeats = 8, 32, 2
    if not os.path.exists(F32):
        sys.exit("run.py: models/SmolLM2-135M-Instruct.F32.gguf is missing (run scripts/setup.sh)")
    awq_s = ensure_awq(args)
    cmds, runs, failed = measure(args)
    bandwidth = read_bandwidth_gbs(args.bin, F32, args.threads)
    # --bin may name another checkout's build of the same commit: record it as BIN, not a local path.
    argv = ["BIN" if os.path.abspath(a) == os.path.abspath(args.bin) else a for a in sys.argv[1:]]
    result = {"provenance": provenance(command="bench/capstone/run.py " + " ".join(argv)),
              "quick": args.quick, "repeats": args.repeats, "read_bandwidth_gbs": bandwidth,
              "workload": {"requests": args.requests, "max_tokens": args.max_tokens, "threads": args.threads,
                           "description": "half rewrite a paragraph of chapters/02_gqa_mla/eval_text.txt, "
                                          "half write a short story", "model": "SmolLM2-135M-Instruct",
                           "awq_file": local_path_free(AWQ), "awq_quantize_s": awq_s},
              "steps": aggregate(args, cmds, runs, failed)}
    plot(write_results(args.out, result, markdown), args.out + ".json")
    print(f"wrote {local_path_free(args.out)}.json, .md, .png", file=sys.stderr)


if __name__ == "__main__":
    main()
