#!/usr/bin/env python3
"""Chapter 06's peer comparison: LIO's speculative decoding against llama.cpp's
`llama-speculative` (draft model) and `llama-lookup` (n-gram lookup) on the same files, prompts,
threads and k, batch 1, greedy (COURSE.md, "Performance method": runs interleaved, repeated,
median and spread; a ratio inside the spread is a tie).

    .venv/bin/python bench/06_speculative/peer.py [--repeats 5] [--k 4] [--max-tokens 64]

The peers are built from the llama.cpp source vendored in the pinned llama-cpp-python sdist by
bench/batched/build_llama_tools.sh --speculative (build-llama/, gitignored). Target: the F32
copy; draft: the shipped Q4_1 file. Plain decoding is measured too: `lio generate` without
speculation and `llama-bench -n N -d D` (tg at the prompt's depth), so each engine's speedup is
over its own plain decoding. Both engines generate exactly --max-tokens tokens (EOS ignored)
after a plain-text prompt (no chat template: both see the same tokens).
Writes bench/results/06_speculative_peer_cpu.{json,md}.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

from liobench import ROOT, flags
from liobench.results_meta import local_path_free, provenance, provenance_lines


LIO = os.path.join(ROOT, "build", "bin", "lio")
LLAMA = os.path.join(os.environ.get("LLAMA_BUILD_DIR", os.path.join(ROOT, "build-llama")), "bin")
Q4 = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
F32 = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.F32.gguf")
PROMPTS = {
    "grounded": ("Here is a paragraph: The cat sat on the mat by the window. Every morning the cat watched the birds "
                 "in the garden, and every evening the cat slept by the fire. The neighbours said the cat was the "
                 "calmest animal on the street.\n\nThe same paragraph, copied word for word: The cat sat on the mat"),
    "free": "Once upon a time, in a small village by the sea, there lived a robot who wanted to learn to paint.",
}


def sh(cmd):
    r = subprocess.run(cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise SystemExit(f"peer.py: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return r.stdout, r.stderr


def lio_run(args, prompt, spec):
    cmd = [LIO, "generate", "--model", F32, "--prompt", prompt, "--max-tokens", str(args.max_tokens),
           "--ignore-eos", "--temperature", "0", "--threads", str(args.threads), "--json"] + spec
    j = json.loads(sh(cmd)[0])
    return {"tokens_per_s": j["tokens_per_s"], "acceptance_rate": j.get("acceptance_rate"),
            "n_tokens": j["n_generated_tokens"], "token_ids": j["token_ids"]}


def llama_spec_run(args, tool, prompt):
    cmd = [os.path.join(LLAMA, tool), "-m", F32, "-p", prompt, "-n", str(args.max_tokens), "--ignore-eos",
           "--temp", "0", "-t", str(args.threads), "-c", "2048", "--draft-max", str(args.k), "--draft-min", "0",
           "-s", "1"]
    if tool == "llama-speculative":
        cmd += ["-md", Q4, "-td", str(args.threads)]
    out, err = sh(cmd)
    text = out + err
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", text)
    drafted = re.search(r"n_drafted\s*=\s*(\d+)", text)
    accepted = re.search(r"n_accept\s*=\s*(\d+)", text)
    if not m:
        raise SystemExit(f"peer.py: cannot read {tool}'s speed from its output:\n{text[-2000:]}")
    rate = int(accepted.group(1)) / int(drafted.group(1)) if drafted and accepted and int(drafted.group(1)) else None
    return {"tokens_per_s": float(m.group(3)), "acceptance_rate": rate, "n_tokens": int(m.group(1))}


def llama_bench_tg(args, depth):
    out, _ = sh([os.path.join(LLAMA, "llama-bench"), "-m", F32, "-p", "0", "-n", str(args.max_tokens), "-d",
                 str(depth), "-t", str(args.threads), "-r", "1", "-o", "json"])
    return {"tokens_per_s": json.loads(out)[0]["avg_ts"]}


def prompt_tokens(prompt):
    return len(json.loads(sh([LIO, "tokenize", "--model", F32, "--prompt", prompt, "--json"])[0])["ids"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    flags.add_repeats(ap, 5)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    flags.add_threads(ap)
    flags.add_out(ap, "06_speculative_peer_cpu")
    args = ap.parse_args()
    subprocess.run(["bash", os.path.join(ROOT, "bench", "batched", "build_llama_tools.sh"), "--speculative"], check=True)
    k = ["--num-speculative-tokens", str(args.k)]
    configs = [  # (engine, method, runner), interleaved in this order every repeat
        ("lio", "plain", lambda p, d: lio_run(args, p, [])),
        ("llama.cpp", "plain", lambda p, d: llama_bench_tg(args, d)),
        ("lio", "ngram", lambda p, d: lio_run(args, p, ["--spec-method", "ngram"] + k)),
        ("llama.cpp", "ngram", lambda p, d: llama_spec_run(args, "llama-lookup", p)),
        ("lio", "draft", lambda p, d: lio_run(args, p, ["--spec-method", "draft", "--draft-model", Q4] + k)),
        ("llama.cpp", "draft", lambda p, d: llama_spec_run(args, "llama-speculative", p)),
    ]
    rows = []
    for name, prompt in PROMPTS.items():
        depth = prompt_tokens(prompt)
        runs = {(e, m): [] for e, m, _ in configs}
        plain_ids = None
        for rep in range(args.repeats):
            for engine, method, fn in configs:
                r = fn(prompt, depth)
                if engine == "lio":  # greedy speculation must not change a token
                    if method == "plain":
                        plain_ids = plain_ids or r["token_ids"]
                    elif r["token_ids"] != plain_ids:
                        raise SystemExit(f"peer.py: lio {method} changed the greedy tokens of '{name}'")
                runs[(engine, method)].append(r)
                print(f"  {name} rep {rep + 1}: {engine} {method} {r['tokens_per_s']:.1f} tok/s", file=sys.stderr)
        for engine, method, _ in configs:
            rs = runs[(engine, method)]
            plain = runs[(engine, "plain")]
            tps = [r["tokens_per_s"] for r in rs]
            speedups = [r["tokens_per_s"] / p["tokens_per_s"] for r, p in zip(rs, plain)]  # same repeat
            acc = [r["acceptance_rate"] for r in rs if r.get("acceptance_rate") is not None]
            rows.append({"prompt": name, "prompt_tokens": depth, "engine": engine, "method": method,
                         "tokens_per_s": statistics.median(tps), "tokens_per_s_min": min(tps),
                         "tokens_per_s_max": max(tps), "speedup": statistics.median(speedups),
                         "speedup_min": min(speedups), "speedup_max": max(speedups),
                         "acceptance_rate": statistics.median(acc) if acc else None, "runs_tokens_per_s": tps})
    # LIO / llama.cpp per (prompt, method), repeat by repeat.
    ratios = []
    for name in PROMPTS:
        for method in ("plain", "ngram", "draft"):
            a = next(r for r in rows if r["prompt"] == name and r["engine"] == "lio" and r["method"] == method)
            b = next(r for r in rows if r["prompt"] == name and r["engine"] == "llama.cpp" and r["method"] == method)
            per = [x / y for x, y in zip(a["runs_tokens_per_s"], b["runs_tokens_per_s"])]
            ratios.append({"prompt": name, "method": method, "lio_over_llama": statistics.median(per),
                           "min": min(per), "max": max(per), "tie": min(per) <= 1.0 <= max(per)})
    result = {"provenance": provenance(command="bench/06_speculative/peer.py " + " ".join(sys.argv[1:])),
              "k": args.k, "max_tokens": args.max_tokens, "threads": args.threads, "repeats": args.repeats,
              "target": os.path.basename(F32), "draft": os.path.basename(Q4), "rows": rows, "ratios": ratios}
    text = local_path_free(json.dumps(result, indent=1))
    with open(args.out + ".json", "w") as f:
        f.write(text + "\n")
    md = ["# Chapter 06: speculative decoding, LIO vs llama.cpp (CPU, batch 1, greedy)", ""]
    md += provenance_lines(result["provenance"]) + ["", f"k = {args.k}, {args.max_tokens} tokens, {args.threads} threads, "
                                                     f"{args.repeats} interleaved repeats; median (min-max).", "",
                                                     "| prompt | engine | method | tok/s | speedup over own plain | acceptance |",
                                                     "|---|---|---|---:|---:|---:|"]
    for r in rows:
        acc = "" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.3f}"
        md.append(f"| {r['prompt']} | {r['engine']} | {r['method']} | {r['tokens_per_s']:.1f} ({r['tokens_per_s_min']:.1f}-"
                  f"{r['tokens_per_s_max']:.1f}) | {r['speedup']:.2f}x ({r['speedup_min']:.2f}-{r['speedup_max']:.2f}) | {acc} |")
    md += ["", "| prompt | method | LIO / llama.cpp tok/s | min-max | tie |", "|---|---|---:|---:|---|"]
    for r in ratios:
        md.append(f"| {r['prompt']} | {r['method']} | {r['lio_over_llama']:.2f}x | {r['min']:.2f}-{r['max']:.2f} | "
                  f"{'tie' if r['tie'] else ''} |")
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"wrote {os.path.relpath(args.out, ROOT)}.json, .md", file=sys.stderr)


if __name__ == "__main__":
    main()
