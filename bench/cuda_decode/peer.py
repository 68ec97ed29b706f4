#!/usr/bin/env python3
"""Batch-1 decode and prefill on one GPU: LIO against llama.cpp's CUDA `llama-bench`, same card,
same GGUF file, in one call (issue 45).

Rounds (default 5), each running, back to back so that drift hits every engine alike:
  llama.cpp  `llama-bench -m MODEL -ngl 99 -p 512 -n 128 -r 1 -fa 0,1 -o json`: pp512 (prefill of
             512 tokens) and tg128 (128 tokens decoded from an empty context), flash attention off
             and on, every layer on the GPU;
  LIO        `lio generate --device cuda --max-tokens 128 --ignore-eos --temperature 0 --warmup 1 --json`
             on a short prompt, --enforce-eager, --cuda-graphs and --cuda-graphs --fused-kernels: its
             decode tok/s (tokens after the first over their time, generate()'s tokens_per_s);
  LIO        the same with a prompt of about 512 tokens and --max-tokens 1: prefill tok/s =
             prompt tokens / TTFT (TTFT includes the first token's sampling, a few microseconds).
Warm-up: llama-bench runs each test once untimed before timing it (its default --warmup); LIO gets
the same, `--warmup 1`: one untimed generate() of another prompt of the same length (no shared
prefix, and generate() runs no prefix cache) in the same process before the timed one, so LIO's
prefill is no longer timed cold in a fresh process (issue 60, defect 7).
Each round gives one ratio per metric from its adjacent runs; the report gives every engine's
median [min-max] and the median [min-max] of the per-round ratios, "tie" when that range holds 1
(COURSE.md, "Performance method"). Targets (issue 45): LIO's batch-1 decode >= 2,500 tok/s and
>= 1.5x llama.cpp's tg128; LIO's prefill >= llama.cpp's pp512.

Usage (on the GPU machine; scripts/gpu_check.sh runs it when the bundle carries llama.cpp):
  python3 bench/cuda_decode/peer.py --lio BIN/lio --llama-bench LLAMA/bin/llama-bench \\
      --model MODEL.gguf --out OUT/cuda_peer_decode [--rounds 5]
LD_LIBRARY_PATH must reach llama.cpp's shared libraries (they sit beside llama-bench in the
bundle). Writes OUT.json and OUT.md (command, commit, machine, GPU, date; no local paths).
--self-test runs the bookkeeping on stand-in engines (scripts that print fixed JSON) and checks the
medians, ratios, ties, targets, failed rounds and that every LIO command line carries the warm-up
(ctest bench_cuda_peer_self_test; no GPU needed).
Exit status: 0 when every run worked, 1 when one failed, 2 for bad arguments.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from liobench.results_meta import local_path_free, provenance, provenance_lines, spread


MIN_ROUNDS = 5             # COURSE.md: peer comparisons repeat at least this many times
TARGET_DECODE_TPS = 2500   # issue 45: batch-1 decode on the Q4_1 file
TARGET_VS_TG128 = 1.5      # ... and this x llama.cpp's tg128
LIO_WARMUP_RUNS = 1        # untimed runs before each timed LIO run: llama-bench's one warm-up per test
SHORT_PROMPT = "The capital of France is"
# About 512 tokens of ordinary English for the prefill runs (SmolLM2's tokenizer: ~1.2 tokens a word).
LONG_PROMPT = " ".join(["The committee met on a cold morning to discuss the budget for the new library, "
                        "and after a long debate about the roof, the windows and the price of books, "
                        "they agreed to meet again the following week."] * 12)


def run_json(cmd, env=None):
    """Runs cmd, returns its stdout parsed as JSON (the first JSON value in it)."""
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    out = r.stdout
    start = min(i for i in (out.find("{"), out.find("[")) if i >= 0)
    return json.JSONDecoder().raw_decode(out[start:])[0]


def lio_generate(a, prompt, max_tokens, *mode):
    """One `lio generate` on the GPU with the flags in mode, after LIO_WARMUP_RUNS untimed runs in the
    same process (as llama-bench warms up); returns its JSON summary."""
    return run_json([a.lio, "generate", "--model", a.model, "--device", "cuda", "--prompt", prompt,
                     "--max-tokens", str(max_tokens), "--ignore-eos", "--temperature", "0",
                     "--warmup", str(LIO_WARMUP_RUNS), "--json", *mode])


def llama_bench(a):
    """One llama-bench run: {(test, flash_attn): tokens/s} for pp512 and tg128, fa 0 and 1."""
    rows = run_json([a.llama_bench, "-m", a.model, "-ngl", "99", "-p", "512", "-n", "128", "-r", "1",
                     "-fa", "0,1", "-o", "json"])
    out = {}
    for r in rows:
        test = f"pp{r['n_prompt']}" if r.get("n_gen", 0) == 0 else f"tg{r['n_gen']}"
        out[(test, int(bool(r.get("flash_attn"))))] = float(r["avg_ts"])
    return out


def cell(s, digits=0):
    if s["min"] == s["max"]:
        return f"{s['median']:,.{digits}f}"
    return f"{s['median']:,.{digits}f} [{s['min']:,.{digits}f}–{s['max']:,.{digits}f}]"


def ratio_cell(s):
    text = cell(s, 2)
    return f"tie ({text})" if s["min"] <= 1.0 <= s["max"] else text


FAKE_LIO = """#!/usr/bin/env python3
import json, sys
a = sys.argv
with open(sys.argv[0] + ".calls", "a") as f:
    f.write(json.dumps(a[1:]) + "\\n")
if "FAIL" in open(sys.argv[0] + ".mode").read():
    sys.exit(3)
if a[a.index("--max-tokens") + 1] == "1":
    print(json.dumps({"ttft_ms": 100.0, "n_prompt_tokens": 500, "tokens_per_s": 0.0}))
else:
    tps = 2000.0 if "--fused-kernels" in a else 1600.0 if "--cuda-graphs" in a else 400.0
    print(json.dumps({"ttft_ms": 5.0, "n_prompt_tokens": 5, "tokens_per_s": tps}))
"""
FAKE_LLAMA = """#!/usr/bin/env python3
import json
rows = [{"n_prompt": 512, "n_gen": 0, "flash_attn": False, "avg_ts": 10000.0},
        {"n_prompt": 512, "n_gen": 0, "flash_attn": True, "avg_ts": 12000.0},
        {"n_prompt": 0, "n_gen": 128, "flash_attn": False, "avg_ts": 900.0},
        {"n_prompt": 0, "n_gen": 128, "flash_attn": True, "avg_ts": 1000.0}]
print("llama-bench: loading model")
print(json.dumps(rows, indent=2))
"""


def self_test():
    """The report's arithmetic on stand-in engines; exits 1 on the first wrong number."""
    with tempfile.TemporaryDirectory() as tmp:
        lio, llama, model = os.path.join(tmp, "lio"), os.path.join(tmp, "llama-bench"), os.path.join(tmp, "m.gguf")
        for path, text in ((lio, FAKE_LIO), (llama, FAKE_LLAMA), (model, "")):
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)
        with open(lio + ".mode", "w") as f:
            f.write("ok")
        out = os.path.join(tmp, "peer")
        rc = main(["--lio", lio, "--llama-bench", llama, "--model", model, "--out", out, "--rounds", "3"])
        with open(out + ".json") as f:
            r = json.load(f)
        rows = {row["metric"].split(",")[-1].strip() if "decode" in row["metric"] else "prefill": row for row in r["rows"]}
        checks = [
            (rc == 0, f"exit status {rc}, want 0"),
            (r["rounds_done"] == 3, f"{r['rounds_done']} rounds done, want 3"),
            (abs(rows["eager"]["ratio"]["median"] - 0.4) < 1e-9, "eager decode / tg128 (the faster fa) != 0.4"),
            (abs(rows["CUDA graphs"]["ratio"]["median"] - 1.6) < 1e-9, "graph decode / tg128 != 1.6"),
            (abs(rows["CUDA graphs + fused kernels"]["ratio"]["median"] - 2.0) < 1e-9,
             "fused graph decode / tg128 != 2.0"),
            (abs(rows["prefill"]["lio"]["median"] - 5000.0) < 1e-6, "prefill = 500 tokens / 0.1 s != 5000"),
            (abs(rows["prefill"]["ratio"]["median"] - 5000.0 / 12000.0) < 1e-9, "prefill / pp512 wrong"),
            ("missed" in r["targets"][0] and "met" in r["targets"][1] and "missed" in r["targets"][2],
             f"targets: {r['targets']}"),
            ("| tie (" not in open(out + ".md").read(), "a ratio of 1.6 on every round is no tie"),
            (ratio_cell({"median": 1.0, "min": 0.9, "max": 1.1}).startswith("tie"), "0.9-1.1 must be a tie")]
        with open(lio + ".calls") as f:
            calls = [json.loads(line) for line in f if line.strip()]
        checks += [
            (len(calls) == 3 * 4, f"{len(calls)} LIO runs, want 12 (3 rounds x eager, graphs, fused, prefill)"),
            (all(c[c.index("--warmup") + 1] == str(LIO_WARMUP_RUNS) for c in calls if "--warmup" in c)
             and all("--warmup" in c for c in calls),
             "a LIO command line lacks --warmup 1 (llama-bench warms up; LIO would be timed cold)"),
            (all("--warmup 1" in cmd for cmd in (r["commands"]["lio_decode"], r["commands"]["lio_prefill"])),
             f"the report's LIO commands lack --warmup 1: {r['commands']}")]
        with open(lio + ".mode", "w") as f:
            f.write("FAIL")
        rc_fail = main(["--lio", lio, "--llama-bench", llama, "--model", model, "--out", out, "--rounds", "2"])
        checks.append((rc_fail == 1, f"every round failing exits {rc_fail}, want 1"))
    bad = [msg for ok, msg in checks if not ok]
    for msg in bad:
        print(f"peer self-test: FAILED: {msg}", file=sys.stderr)
    if not bad:
        print(f"peer self-test: {len(checks)} checks passed")
    return 1 if bad else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--self-test", action="store_true", help="check the bookkeeping on stand-in engines")
    ap.add_argument("--lio")
    ap.add_argument("--llama-bench")
    ap.add_argument("--model")
    ap.add_argument("--out", help="path without extension: writes .json and .md")
    ap.add_argument("--rounds", type=int, default=MIN_ROUNDS)
    ap.add_argument("--check-args", action="store_true",
                    help="parse the command line and exit 0, touching no file (scripts/gpu_check.sh --dry-run)")
    a = ap.parse_args(argv)
    if a.self_test:
        return self_test()
    if not (a.lio and a.llama_bench and a.model and a.out):
        ap.error("--lio, --llama-bench, --model and --out are required")
    if a.rounds < 1:
        ap.error("--rounds must be >= 1")
    if a.check_args:
        return 0
    for path in (a.lio, a.llama_bench, a.model):
        if not os.path.exists(path):
            ap.error(f"{path} does not exist")
    t0 = time.time()
    runs = []  # one dict per round
    failed = []
    for rnd in range(a.rounds):
        r = {}
        try:
            lb = llama_bench(a)
            r["llama_tg128"] = max(lb.get(("tg128", 0), 0), lb.get(("tg128", 1), 0))  # its faster setting
            r["llama_pp512"] = max(lb.get(("pp512", 0), 0), lb.get(("pp512", 1), 0))
            r["llama_all"] = {f"{t} fa{fa}": v for (t, fa), v in sorted(lb.items())}
            r["lio_decode_eager"] = lio_generate(a, SHORT_PROMPT, 128, "--enforce-eager")["tokens_per_s"]
            r["lio_decode_graphs"] = lio_generate(a, SHORT_PROMPT, 128, "--cuda-graphs")["tokens_per_s"]
            # issue 60: the fused decode kernels had never been timed against the peer
            r["lio_decode_fused"] = lio_generate(a, SHORT_PROMPT, 128, "--cuda-graphs",
                                                 "--fused-kernels")["tokens_per_s"]
            g = lio_generate(a, LONG_PROMPT, 1, "--cuda-graphs")
            r["lio_prefill_tokens"] = g["n_prompt_tokens"]
            r["lio_prefill"] = g["n_prompt_tokens"] / (g["ttft_ms"] / 1000.0)
        except (RuntimeError, subprocess.SubprocessError, ValueError, KeyError) as e:
            failed.append(f"round {rnd + 1}: {e}")
            print(f"peer: round {rnd + 1} failed: {e}", file=sys.stderr, flush=True)
            continue
        runs.append(r)
        print(f"[round {rnd + 1}/{a.rounds}] LIO decode {r['lio_decode_eager']:.0f} eager / "
              f"{r['lio_decode_graphs']:.0f} graphs / {r['lio_decode_fused']:.0f} graphs + fused tok/s, llama.cpp tg128 {r['llama_tg128']:.0f}; LIO prefill "
              f"{r['lio_prefill']:.0f}, llama.cpp pp512 {r['llama_pp512']:.0f} tok/s", flush=True)
    if not runs:
        print("peer: no round finished", file=sys.stderr)
        return 1
    metrics = [("batch-1 decode tok/s, eager", "lio_decode_eager", "llama_tg128"),
               ("batch-1 decode tok/s, CUDA graphs", "lio_decode_graphs", "llama_tg128"),
               ("batch-1 decode tok/s, CUDA graphs + fused kernels", "lio_decode_fused", "llama_tg128"),
               ("prefill tok/s (LIO ~512-token prompt, llama.cpp pp512)", "lio_prefill", "llama_pp512")]
    rows = []
    for name, ours, theirs in metrics:
        rows.append({"metric": name, "lio": spread([r[ours] for r in runs]),
                     "llama_cpp": spread([r[theirs] for r in runs]),
                     "ratio": spread([r[ours] / r[theirs] for r in runs if r[theirs]])})
    graphs = rows[1]
    targets = [
        f"- batch-1 decode >= {TARGET_DECODE_TPS:,} tok/s: {graphs['lio']['median']:,.0f} "
        f"(**{'met' if graphs['lio']['median'] >= TARGET_DECODE_TPS else 'missed'}**)",
        f"- >= {TARGET_VS_TG128}x llama.cpp's tg128: {ratio_cell(graphs['ratio'])} "
        f"(**{'met' if graphs['ratio']['median'] >= TARGET_VS_TG128 else 'missed'}**)",
        f"- prefill >= llama.cpp's pp512: {ratio_cell(rows[3]['ratio'])} "
        f"(**{'met' if rows[3]['ratio']['median'] >= 1.0 else 'missed'}**)"]
    prov = provenance()
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             stdout=subprocess.PIPE, text=True, check=True).stdout.splitlines()[0]
        gpu, driver = [x.strip() for x in smi.split(",")[:2]]
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        gpu, driver = "unknown", "unknown"
    prov.setdefault("machine", {}).update({"gpu": gpu, "driver": driver})
    result = {"provenance": prov, "rounds": a.rounds, "rounds_done": len(runs), "min_rounds_rule": MIN_ROUNDS,
              "failed": failed, "model": local_path_free(a.model),
              "commands": {"llama_bench": "llama-bench -m MODEL -ngl 99 -p 512 -n 128 -r 1 -fa 0,1 -o json",
                           "lio_decode": "lio generate --model MODEL --device cuda --prompt '" + SHORT_PROMPT +
                                         f"' --max-tokens 128 --ignore-eos --temperature 0 --warmup {LIO_WARMUP_RUNS} "
                                         "--json (--enforce-eager | --cuda-graphs | --cuda-graphs --fused-kernels)",
                           "lio_prefill": "lio generate --model MODEL --device cuda --prompt LONG --max-tokens 1 "
                                          f"--ignore-eos --temperature 0 --warmup {LIO_WARMUP_RUNS} --json "
                                          "--cuda-graphs"},
              "rows": rows, "runs": runs, "targets": targets, "seconds": round(time.time() - t0, 1)}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out + ".json", "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    below = len(runs) < MIN_ROUNDS
    md = [f"# Batch-1 decode and prefill on {gpu}: LIO vs llama.cpp CUDA", ""] + provenance_lines(prov) + [
        f"- GPU: {gpu}, driver {driver}; model {local_path_free(a.model)}",
        f"- {len(runs)} rounds of {a.rounds}, each: llama-bench (pp512, tg128, flash attention off and on; "
        "the faster of the two is the peer), then LIO decode eager, with CUDA graphs, with CUDA graphs and the "
        "fused kernels, then LIO prefill. "
        "Cells: median [min–max] over the rounds; ratios LIO / llama.cpp: median [min–max] of the per-round "
        "ratios, \"tie\" when that range holds 1." + (f" **Below the rule**: COURSE.md asks for at least "
                                                     f"{MIN_ROUNDS} rounds." if below else ""),
        f"- llama.cpp: `{result['commands']['llama_bench']}`",
        f"- LIO: `{result['commands']['lio_decode']}`; `{result['commands']['lio_prefill']}`",
        "", "| metric | LIO | llama.cpp | LIO / llama.cpp |", "|---|---:|---:|---:|"]
    for row in rows:
        md.append(f"| {row['metric']} | {cell(row['lio'])} | {cell(row['llama_cpp'])} | {ratio_cell(row['ratio'])} |")
    md += ["", "Targets (issue 45):", *targets]
    if failed:
        md += ["", "Failed rounds:", *[f"- {f}" for f in failed]]
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
