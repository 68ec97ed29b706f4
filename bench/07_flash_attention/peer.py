#!/usr/bin/env python3
"""Chapter 07's peer comparison: the whole model at long context, LIO with its flash and naive
attention against llama.cpp with flash attention on and off (`llama-bench -fa`), on the same
Q4_1 file and threads (COURSE.md, "Performance method": runs interleaved, repeated, median and
min-max; a ratio whose per-repeat range holds 1 is a tie).

    .venv/bin/python bench/07_flash_attention/peer.py [--contexts 4096] [--repeats 5]
        [--threads T] [--decode-tokens 32] [--kv-cache-dtype f32]

Per context N and repeat, in this order: LIO flash, LIO naive (`build/bin/ch07_flash_attention
model --context N --decode-tokens 32 --attention-backend flash|naive --json`: prefill of an
N-token prompt from an empty cache, then 32 greedy tokens decoded at depth N, EOS ignored), then
llama.cpp with flash attention on and off, each as two `llama-bench` processes: prefill (`-p N
-n 0`) and decode at depth N (`-p 0 -n 32 -d N`), one repetition each (`-r 1`). Prefill and
decode tok/s per engine and setting; per repeat the ratios LIO flash / llama.cpp flash (and each
engine's flash / no-flash), with their median and min-max.

The peer is built from the llama.cpp source vendored in the pinned llama-cpp-python sdist by
bench/batched/build_llama_tools.sh --speculative (build-llama/, gitignored; it builds
llama-bench). Its -fa flag takes 0|1 in older versions and on|off in newer ones: read from
`llama-bench --help`. K/V elements: --kv-cache-dtype for both engines (LIO's --kv-cache-dtype,
llama.cpp's -ctk/-ctv; default f16: the vendored llama-bench takes no f32 cache type).
Writes bench/results/07_flash_attention_peer_cpu.{json,md}.
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


CH07 = os.path.join(ROOT, "build", "bin", "ch07_flash_attention")
LLAMA = os.path.join(os.environ.get("LLAMA_BUILD_DIR", os.path.join(ROOT, "build-llama")), "bin")
Q4 = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
# (engine, flash, label): the interleaving order of every repeat.
CONFIGS = [("lio", True, "LIO flash"), ("lio", False, "LIO naive"),
           ("llama.cpp", True, "llama.cpp -fa on"), ("llama.cpp", False, "llama.cpp -fa off")]
METRICS = ("prefill", "decode")


def sh(cmd):
    r = subprocess.run(cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise SystemExit(f"peer.py: {local_path_free(' '.join(cmd))} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return r.stdout


def fa_values(llama_bench):
    """('1', '0') or ('on', 'off'): what this llama-bench's -fa flag takes."""
    r = subprocess.run([llama_bench, "--help"], text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    line = next((x for x in r.stdout.splitlines() if re.search(r"-fa,|--flash-attn", x)), None)
    if line is None:
        raise SystemExit(f"peer.py: {os.path.basename(llama_bench)} --help names no -fa / --flash-attn flag")
    return ("on", "off") if re.search(r"\bon\b", line) else ("1", "0")


def lio_run(args, context, flash):
    """{prefill, decode} tok/s of one ch07_flash_attention model process."""
    cmd = [args.ch07, "model", "--model", args.model, "--context", str(context), "--decode-tokens",
           str(args.decode_tokens), "--attention-backend", "flash" if flash else "naive", "--threads",
           str(args.threads), "--kv-cache-dtype", args.kv_cache_dtype, "--json"]
    j = json.loads(sh(cmd))
    if j.get("n_decoded") != args.decode_tokens or j.get("context") != context:
        raise SystemExit(f"peer.py: LIO decoded {j.get('n_decoded')} tokens at context {j.get('context')}, "
                         f"expected {args.decode_tokens} at {context}")
    return {"prefill": j["prefill_tok_s"], "decode": j["decode_tok_s"]}


def llama_run(args, context, flash, fa):
    """{prefill, decode} tok/s of two llama-bench processes (prefill; decode at depth)."""
    base = [os.path.join(args.llama_dir, "llama-bench"), "-m", args.model, "-t", str(args.threads), "-r", "1",
            "-o", "json", "-fa", fa[0] if flash else fa[1], "-ctk", args.kv_cache_dtype, "-ctv", args.kv_cache_dtype]
    pp = json.loads(sh(base + ["-p", str(context), "-n", "0"]))
    tg = json.loads(sh(base + ["-p", "0", "-n", str(args.decode_tokens), "-d", str(context)]))
    return {"prefill": pp[0]["avg_ts"], "decode": tg[0]["avg_ts"]}


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def ratio_row(context, metric, pair, a, b):
    per = [x / y for x, y in zip(a, b)]  # repeat by repeat
    return {"context": context, "metric": metric, "pair": pair, "ratio": statistics.median(per),
            "min": min(per), "max": max(per), "tie": min(per) <= 1.0 <= max(per), "runs": per}


# (name, numerator, denominator): LIO's default against llama.cpp's with flash attention and
# against llama.cpp's faster setting on this machine, whichever it is; each engine's own switch.
PAIRS = (("LIO flash / llama.cpp flash", "LIO flash", "llama.cpp -fa on"),
         ("LIO flash / llama.cpp no flash", "LIO flash", "llama.cpp -fa off"),
         ("LIO naive / llama.cpp no flash", "LIO naive", "llama.cpp -fa off"),
         ("LIO flash / LIO naive", "LIO flash", "LIO naive"),
         ("llama.cpp flash / no flash", "llama.cpp -fa on", "llama.cpp -fa off"))


def context_ratios(context, runs):
    """Every PAIRS ratio at one context from runs[label][metric] (per-repeat values, in order)."""
    return [ratio_row(context, m, pair, runs[a][m], runs[b][m]) for m in METRICS for pair, a, b in PAIRS]


def reaggregate(path):
    """Recomputes a results file's ratios from the per-repeat runs it stores (after PAIRS grew)."""
    with open(path + ".json") as f:
        result = json.load(f)
    result["ratios"] = []
    for context in result["contexts"]:
        runs = {r["label"]: r["runs"] for r in result["rows"] if r["context"] == context}
        result["ratios"] += context_ratios(context, runs)
    text = json.dumps(result, indent=1)
    with open(path + ".json", "w") as f:
        f.write(text + "\n")
    with open(path + ".md", "w") as f:
        f.write(markdown(result))


def markdown(result):
    md = ["# Chapter 07: FlashAttention end to end, LIO vs llama.cpp (CPU, batch 1)", ""]
    md += provenance_lines(result["provenance"]) + [
        "", f"`{result['model']}`, {result['threads']} threads, K/V {result['kv_cache_dtype']}, "
            f"{result['decode_tokens']} tokens decoded at depth N, llama-bench -fa {'/'.join(result['llama_fa_values'])}; "
            f"{result['repeats']} interleaved repeats, median (min-max).", "",
        "| context | engine | attention | prefill tok/s | decode tok/s |", "|---:|---|---|---:|---:|"]
    for r in result["rows"]:
        p, d = r["prefill_tok_s"], r["decode_tok_s"]
        md.append(f"| {r['context']} | {r['engine']} | {'flash' if r['flash'] else 'no flash'} | "
                  f"{p['median']:.1f} ({p['min']:.1f}-{p['max']:.1f}) | {d['median']:.2f} ({d['min']:.2f}-{d['max']:.2f}) |")
    md += ["", "| context | metric | ratio | median | min-max over repeats | tie |", "|---:|---|---|---:|---:|---|"]
    for r in result["ratios"]:
        md.append(f"| {r['context']} | {r['metric']} | {r['pair']} | {r['ratio']:.2f}x | {r['min']:.2f}-{r['max']:.2f} | "
                  f"{'tie' if r['tie'] else ''} |")
    return "\n".join(md) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", default="4096", help="comma-separated N (prompt length and decode depth)")
    flags.add_repeats(ap, 5)
    flags.add_threads(ap)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--kv-cache-dtype", choices=("f32", "f16"), default="f16",
                    help="K/V elements in both engines (f16: llama-bench's default; the vendored "
                         "llama-bench rejects -ctk f32)")
    ap.add_argument("--model", default=Q4)
    ap.add_argument("--ch07", default=CH07, help="the chapter program")
    ap.add_argument("--llama-dir", default=LLAMA, help="folder holding llama-bench")
    ap.add_argument("--no-build", action="store_true", help="do not run build_llama_tools.sh")
    flags.add_out(ap, "07_flash_attention_peer_cpu")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    ap.add_argument("--reaggregate", action="store_true",
                    help="run nothing: recompute --out's ratios from the per-repeat runs it stores")
    args = ap.parse_args()
    if args.reaggregate:
        reaggregate(args.out)
        print(f"re-derived {os.path.relpath(args.out, ROOT)}.json, .md from their stored runs", file=sys.stderr)
        return
    contexts = [int(x) for x in args.contexts.split(",") if x.strip()]
    if not contexts or min(contexts) < 1 or args.repeats < 1 or args.decode_tokens < 1:
        sys.exit("peer.py: --contexts, --repeats and --decode-tokens need positive values")
    if args.repeats < 5:
        print(f"peer.py: {args.repeats} repeats is below the course's rule of 5 (COURSE.md)", file=sys.stderr)
    if args.dry_run:
        print(f"contexts {contexts}, {args.repeats} repeats, {args.threads} threads, order per repeat: "
              f"{', '.join(c[2] for c in CONFIGS)}", file=sys.stderr)
        return
    if not args.no_build:
        subprocess.run(["bash", os.path.join(ROOT, "bench", "batched", "build_llama_tools.sh"), "--speculative"],
                       check=True)
    for f in (args.model, args.ch07, os.path.join(args.llama_dir, "llama-bench")):
        if not os.path.exists(f):
            sys.exit(f"peer.py: {local_path_free(f)} is missing")
    fa = fa_values(os.path.join(args.llama_dir, "llama-bench"))
    rows, ratios = [], []
    for context in contexts:
        runs = {label: {m: [] for m in METRICS} for _, _, label in CONFIGS}
        for rep in range(args.repeats):
            for engine, flash, label in CONFIGS:
                r = lio_run(args, context, flash) if engine == "lio" else llama_run(args, context, flash, fa)
                for m in METRICS:
                    runs[label][m].append(r[m])
                print(f"  N={context} rep {rep + 1}: {label}: prefill {r['prefill']:.1f} tok/s, "
                      f"decode {r['decode']:.2f} tok/s", file=sys.stderr)
        for engine, flash, label in CONFIGS:
            rows.append({"context": context, "engine": engine, "flash": flash, "label": label,
                         "prefill_tok_s": summary(runs[label]["prefill"]), "decode_tok_s": summary(runs[label]["decode"]),
                         "runs": runs[label]})
        ratios += context_ratios(context, runs)
    result = {"provenance": provenance(command="bench/07_flash_attention/peer.py " + " ".join(sys.argv[1:])),
              "model": os.path.basename(args.model), "threads": args.threads, "repeats": args.repeats,
              "decode_tokens": args.decode_tokens, "kv_cache_dtype": args.kv_cache_dtype, "llama_fa_values": list(fa),
              "contexts": contexts, "rows": rows, "ratios": ratios}
    text = local_path_free(json.dumps(result, indent=1))
    with open(args.out + ".json", "w") as f:
        f.write(text + "\n")
    with open(args.out + ".md", "w") as f:
        f.write(markdown(json.loads(text)))
    print(f"wrote {os.path.relpath(args.out, ROOT)}.json, .md", file=sys.stderr)


if __name__ == "__main__":
    main()
