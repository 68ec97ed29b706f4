#!/usr/bin/env python3
"""Offline batched throughput: `lio batch` vs llama.cpp's `llama-batched-bench`, same GGUF files.

Workload (vLLM's offline benchmark shape): requests of exactly P prompt tokens (distinct
windows of real text, tokenized by `lio tokenize`), N generated tokens each, greedy, EOS
ignored. For each concurrency C:
  LIO        `lio batch --max-num-seqs C` over min(--requests 64, --waves 4 x C) requests (all
             queued at once, continuous batching; every request is the same work, so C=1 needs
             no 64 sequential requests to reach its steady state, and skipping them keeps the
             run short), reading its --summary: output tok/s end to end, decode tok/s over the
             steps that ran no prompt row, median TTFT / TPOT.
  llama.cpp  `llama-batched-bench -npp P -ntg N -npl C`: C sequences prefilled together, then
             decoded together (S_TG t/s = decode throughput; output tok/s = C*N / T).
Both on the Q4_1 file as shipped and its F32 copy, same thread count.

Repeats and ties (COURSE.md, "Performance method"): each point runs LIO, then llama.cpp at the same
C (`-npl C` alone), --repeats times (default 5), so the engines alternate A B A B and drift on a
shared machine hits both. Each repeat gives one ratio LIO / llama.cpp from its adjacent pair. The
report gives, per metric, each engine's median and min-max and the per-repeat ratios' median and
min-max; when that ratio range holds 1 the row says "tie": the run does not tell the engines
apart. --quick runs 2 repeats, below the rule, and says so in its output.
Achieved GB/s = weight bytes x decode steps/s (each decode step reads every weight once,
whatever the batch), next to a read bandwidth measured in the same run (bench_decode's probe).

Writes bench/results/batched.csv, .json, .md and .png; the .json and .md record the command,
commit, machine and date (bench/liobench/results_meta.py), with no local paths.
Usage: .venv/bin/python bench/batched/run.py [--quick] [--repeats 5] [--concurrency 1,4,16,32,64]
Needs build/bin/lio (Release) and bench/batched/build_llama_tools.sh run once.

--device cuda (issue 45): the same comparison on a GPU, both engines on the card — LIO with
`--device cuda` (plus --lio-args, e.g. --cuda-graphs), llama-batched-bench with `-ngl 99` (every
layer on the GPU; from build_llama_tools.sh --cuda-arch N, its libraries found through
LD_LIBRARY_PATH) — on the Q4_1 file only; the targets are issue 45's at C=64 (2x the 11,711 decode
tok/s measured before, and 1.5x llama.cpp's S_TG). scripts/gpu_check.sh runs it when the bundle
carries llama.cpp.
"""
import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

from liobench import ROOT, flags, repo_module
from liobench.results_meta import NUMERIC_PROBE_KEYS, local_path_free, machine_probes, provenance, provenance_lines
from liobench.stats import is_tie, median_min_max


TARGET_C = 32            # the concurrency the targets are stated at
TARGET_VS_C1 = 3.0       # LIO decode throughput at TARGET_C >= this x its C=1
TARGET_VS_LLAMA = 2.5    # ... and >= this x llama-batched-bench's S_TG at TARGET_C (issue 64)
TARGET_VS_IK = 1.2       # ... and >= this x ik_llama.cpp's best -rtr (issue 64)
IK_BENCH = os.path.join(ROOT, "build-ik/bin/llama-batched-bench")
IK_REPACK = (0, 1)       # ik_llama.cpp's run-time repacking off / on (--run-time-repack); a point keeps its best
# ik_llama.cpp's flash attention (on by default) stops at GGML_ASSERT(S > 0) (iqk_fa_templates.h:1157)
# with more than one sequence in ik-llama-cpp-python 0.1.5's sources, so its runs turn it off.
IK_ARGS = ("-fa", "0")
MIN_REPEATS = 5          # COURSE.md: peer comparisons repeat at least this many times
SPREAD_KEYS = ("output_tok_s", "decode_tok_s", "median_tpot_ms")  # per-engine metrics with min-max


# ---------------------------------------------------------------------------------------
# Machine and inputs
# ---------------------------------------------------------------------------------------

def machine_info():
    """CPU model, logical CPUs, cores per socket, from lscpu (falls back to /proc/cpuinfo)."""
    info = {"cpu": "unknown", "cpus": os.cpu_count(), "arch": platform.machine()}
    try:
        out = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True, check=True).stdout
        fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        info["cpu"] = fields.get("Model name", info["cpu"])
        info["cpus"] = int(fields.get("CPU(s)", info["cpus"]))
        info["threads_per_core"] = int(fields.get("Thread(s) per core", 1))
        info["cores_per_socket"] = int(fields.get("Core(s) per socket", 0))
    except (OSError, subprocess.CalledProcessError, ValueError):
        pass
    try:
        with open("/proc/meminfo") as f:
            info["mem_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    return info


def gpu_info():
    """The first GPU's name and driver from nvidia-smi, or None."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True).stdout
        name, driver = [f.strip() for f in out.splitlines()[0].split(",")[:2]]
        return {"gpu": name, "driver": driver}
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        return None


def matrix_weights(model):
    """Matrix weights one decode token multiplies (bench/cpu_decode/roofline.py's count from the
    GGUF tensor table), or None without the Python gguf package (a GPU image)."""
    try:
        return repo_module("bench/cpu_decode/roofline.py").matrix_weights(model)
    except ImportError:
        return None


def lio_json(lio, *args):
    """Runs `lio ARGS` and parses its JSON stdout."""
    out = subprocess.run([lio, *args], stdout=subprocess.PIPE, text=True, check=True).stdout
    return json.loads(out)


def make_prompts(lio, model, n_requests, n_tokens, path):
    """Writes `n_requests` JSONL lines {"prompt_token_ids": [...]} of exactly `n_tokens` ids:
    windows of the repo's own docs, tokenized by LIO, at offsets 64 tokens apart (wrapping)."""
    text = ""
    for rel in ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs"))
                                      if f.endswith(".md")):
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            text += f.read() + "\n"
    text = text[:100_000]  # one argv string stays below Linux's 128 KiB limit
    ids = lio_json(lio, "tokenize", "--model", model, "--json", "--prompt", text)["ids"]
    if len(ids) < n_tokens:
        sys.exit(f"make_prompts: only {len(ids)} tokens of text, need {n_tokens}")
    with open(path, "w") as f:
        for i in range(n_requests):
            start = (i * 64) % (len(ids) - n_tokens + 1)
            f.write(json.dumps({"prompt_token_ids": ids[start:start + n_tokens]}) + "\n")


# ---------------------------------------------------------------------------------------
# The two engines
# ---------------------------------------------------------------------------------------

def run_lio(a, model, prompts, concurrency, n_requests):
    """One `lio batch` run; returns its summary dict (see run_batch in chapters/lio/batch.cpp)."""
    with tempfile.TemporaryDirectory() as tmp:
        sub = os.path.join(tmp, "prompts.jsonl")
        with open(prompts) as f, open(sub, "w") as g:
            g.writelines(f.readlines()[:n_requests])
        summary = os.path.join(tmp, "summary.json")
        cmd = [a.lio, "batch", "--model", model, "--prompts", sub, "--out", os.path.join(tmp, "out.jsonl"),
               "--summary", summary, "--max-tokens", str(a.gen_tokens), "--ignore-eos", "--temperature", "0",
               "--max-num-seqs", str(concurrency), "--max-num-batched-tokens", str(a.batched_tokens),
               "--threads", str(a.threads)] + a.lio_args.split()
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            sys.exit(f"lio batch failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
        with open(summary) as f:
            s = json.load(f)
        if s["n_failed"] or s["output_tokens"] != n_requests * a.gen_tokens:
            sys.exit(f"lio batch: {s['n_failed']} failed, {s['output_tokens']} output tokens "
                     f"(expected {n_requests * a.gen_tokens})")
        return s


TABLE_ROW = re.compile(r"^\|\s*\d")


def run_llama(a, model, npl, bench=None, extra=()):
    """One llama-batched-bench run over every concurrency in `npl` (`bench`: that program, default
    --llama-bench; ik_llama.cpp's takes the same flags; `extra`: more of them); returns ({C: row}
    with the table's columns (PP, TG, B, N_KV, T_PP s, S_PP t/s, T_TG s, S_TG t/s, T s, S t/s), the
    command line with the model as MODEL). Exits on a failed run or an unparsable table."""
    ctx = max(npl) * (a.prompt_tokens + a.gen_tokens) + 64
    cmd = [bench or a.llama_bench, "-m", model, "-c", str(ctx), "-b", "2048", "-ub", "512",
           "-npp", str(a.prompt_tokens), "-ntg", str(a.gen_tokens), "-npl", ",".join(map(str, npl)),
           "-t", str(a.threads), "-tb", str(a.threads)] + a.llama_args.split() + list(extra)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"{os.path.basename(cmd[0])} failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-3000:]}")
    header, rows = None, {}
    for line in (r.stdout + "\n" + r.stderr).splitlines():  # ik_llama.cpp's prints its table to stderr
        if line.startswith("|") and "S_TG" in line:
            header = [c.strip() for c in line.strip().strip("|").split("|")]
        elif header and TABLE_ROW.match(line):
            cells = [float(c) for c in line.strip().strip("|").split("|")]
            row = dict(zip(header, cells))
            rows[int(row["B"])] = row
    if set(rows) != set(npl):
        sys.exit(f"llama-batched-bench: could not parse rows for {npl} from:\n{r.stdout}")
    shown = ["MODEL" if c == model else os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd]
    return rows, " ".join(shown)


# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------

def no_nan(row):
    """The row with NaN cells as None (JSON has no NaN)."""
    return {k: None if isinstance(v, float) and v != v else v for k, v in row.items()}


def med(values):
    return statistics.median(values) if values else float("nan")


spread = median_min_max  # (median, min, max) of the values, NaN where there are none


def ratio_spread(pairs):
    """pairs: [(lio, llama)] of one metric, one per repeat (adjacent runs): median, min, max of the
    per-repeat ratios lio / llama and the tie flag (the range holds 1)."""
    ratios = [x / y for x, y in pairs if y]
    r_med, r_min, r_max = spread(ratios)
    return r_med, r_min, r_max, bool(ratios) and is_tie(r_min, r_max)


def fmt_cell(median, lo, hi, digits=1):
    """'median [min–max]', or the median alone when there is one run."""
    if median != median:
        return "nan"
    if lo == hi:
        return f"{median:.{digits}f}"
    return f"{median:.{digits}f} [{lo:.{digits}f}–{hi:.{digits}f}]"


def fmt_ratio(median, lo, hi, tie):
    text = fmt_cell(median, lo, hi, 2)
    return f"tie ({text})" if tie else text


def write_csv(path, rows):
    keys = list(rows[0].keys())
    with open(path, "w") as f:
        f.write(",".join(keys) + "\n")
        for r in rows:
            f.write(",".join(f"{r[k]:.5g}" if isinstance(r[k], float) else str(r[k]) for k in keys) + "\n")


def write_plot(path, rows, concurrency, prompt_tokens, gen_tokens):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {("lio", "Q4_1"): ("C0", "-", "o"), ("lio", "F32"): ("C0", "--", "s"),
              ("llama.cpp", "Q4_1"): ("C1", "-", "o"), ("llama.cpp", "F32"): ("C1", "--", "s"),
              ("ik_llama.cpp", "Q4_1"): ("C2", "-", "o"), ("ik_llama.cpp", "F32"): ("C2", "--", "s")}
    for ax, key, title in ((axes[0], "output_tok_s", "output tok/s, end to end"),
                           (axes[1], "decode_tok_s", "decode tok/s (decode-only steps)")):
        for (engine, dtype), (color, ls, marker) in styles.items():
            pts = sorted((r["concurrency"], r[key], r.get(key + "_min", r[key]), r.get(key + "_max", r[key]))
                         for r in rows if r["engine"] == engine and r["weights"] == dtype)
            if pts:
                # median, with the min-max of the repeats as error bars
                ax.errorbar([p[0] for p in pts], [p[1] for p in pts],
                            yerr=[[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]], color=color,
                            linestyle=ls, marker=marker, capsize=3,
                            label=f"{'LIO' if engine == 'lio' else engine} {dtype}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(concurrency)
        ax.set_xticklabels([str(c) for c in concurrency])
        ax.set_xlabel("concurrency (max_num_seqs / npl)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("tokens/s")
    axes[0].legend()
    fig.suptitle(f"SmolLM2-135M offline batched generation ({prompt_tokens} prompt + {gen_tokens} generated "
                 "tokens per request)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    flags.add_model(ap)
    flags.add_lio(ap)
    ap.add_argument("--llama-bench", default=os.path.join(ROOT, "build-llama/bin/llama-batched-bench"))
    ap.add_argument("--concurrency", default="1,4,16,32,64", help="comma-separated C values")
    ap.add_argument("--requests", type=int, default=64,
                    help="LIO requests per point at most (always at least C)")
    ap.add_argument("--waves", type=int, default=4,
                    help="LIO requests per point at least this many waves of C: min(--requests, waves*C)")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--batched-tokens", type=int, default=512,
                    help="LIO --max-num-batched-tokens (= llama.cpp's -ub 512 micro-batch)")
    ap.add_argument("--repeats", type=int, default=MIN_REPEATS,
                    help=f"interleaved LIO / llama.cpp pairs per point (COURSE.md: >= {MIN_REPEATS}); one "
                         "sweep takes ~8 min on 2 cores, so 5 take ~40 min")
    flags.add_threads(ap)
    ap.add_argument("--weights", default="Q4_1,F32", help="which files: Q4_1, F32 or both")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run (~4 min): C 1,4,16; <= 16 requests; 2 repeats (below the rule's 5)")
    ap.add_argument("--skip-llama", action="store_true", help="LIO only")
    ap.add_argument("--lio-args", default="",
                    help='extra flags for every `lio batch` run, e.g. "--activations int8" or "--device cuda" '
                         "(recorded in the .md's command line; llama.cpp still runs on the CPU)")
    flags.add_out(ap, "batched")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cuda: both engines on the GPU (LIO --device cuda, llama.cpp -ngl 99), Q4_1 only")
    ap.add_argument("--llama-args", default="", help="extra arguments for llama-batched-bench")
    ap.add_argument("--ik-bench", default=IK_BENCH,
                    help="ik_llama.cpp's llama-batched-bench (bench/batched/build_llama_tools.sh --ik), run with "
                         "--run-time-repack off and on at every point; 'none' leaves it out (CPU only)")
    ap.add_argument("--check-args", action="store_true",
                    help="parse the command line, print what it resolves to and exit 0, touching no file "
                         "(scripts/gpu_check.sh --dry-run checks its peer command lines so)")
    a = ap.parse_args()
    if a.device == "cuda":
        a.lio_args = ("--device cuda " + a.lio_args).strip()
        a.llama_args = ("-ngl 99 " + a.llama_args).strip()
        a.weights = "Q4_1"  # the F32 copy is made by the Python gguf tools, which a GPU image lacks
        a.ik_bench = "none"  # the ik_llama.cpp peer is built for the CPU only
    ik = a.ik_bench != "none" and not a.skip_llama
    if a.quick:
        a.concurrency, a.requests, a.waves, a.repeats = "1,4,16", 16, 4, 2
    below_rule = a.repeats < MIN_REPEATS and not a.skip_llama
    if below_rule:
        print(f"warning: {a.repeats} repeats: COURSE.md asks for at least {MIN_REPEATS} to call a ratio "
              "(a win, a loss or a tie); this run is below the rule", file=sys.stderr)
    try:
        concurrency = [int(c) for c in a.concurrency.split(",")]
    except ValueError:
        ap.error(f"--concurrency {a.concurrency!r}: give comma-separated integers")
    weights = a.weights.split(",")
    if a.check_args:
        print(json.dumps({"device": a.device, "concurrency": concurrency, "weights": weights,
                          "lio_args": shlex.split(a.lio_args), "llama_args": shlex.split(a.llama_args),
                          "prompt_tokens": a.prompt_tokens, "gen_tokens": a.gen_tokens}))
        return 0
    if not os.path.exists(a.lio):
        sys.exit(f"{a.lio} not found: build LIO first (cmake --preset release && cmake --build build)")
    if not a.skip_llama and not os.path.exists(a.llama_bench):
        sys.exit(f"{a.llama_bench} not found: run bench/batched/build_llama_tools.sh")
    if ik and not os.path.exists(a.ik_bench):
        sys.exit(f"{a.ik_bench} not found: run bench/batched/build_llama_tools.sh --ik (or pass --ik-bench none)")

    files = {"Q4_1": a.model, "F32": os.path.join(os.path.dirname(a.model), "SmolLM2-135M-Instruct.F32.gguf")}
    if "F32" in weights:
        repo_module("scripts/make_f32_copy.py").make_f32_copy(files["Q4_1"], files["F32"])
    machine = machine_info()
    prov = provenance()
    gpu = gpu_info() if a.device == "cuda" else None
    if a.device == "cuda":
        if gpu is None:
            sys.exit("--device cuda: nvidia-smi reports no GPU")
        prov.setdefault("machine", {}).update(gpu)
    load_start = os.getloadavg()[0]
    print(f"machine: {machine}; load average {load_start:.2f}", flush=True)
    if load_start > 1.0:
        print("warning: the machine is busy; other processes will distort the numbers", flush=True)
    t_start = time.time()

    prompts = os.path.join(tempfile.mkdtemp(prefix="lio_batched_"), "prompts.jsonl")
    def n_requests(c):
        return max(c, min(a.requests, a.waves * c))

    n_max = max(n_requests(c) for c in concurrency)
    make_prompts(a.lio, files["Q4_1"], n_max, a.prompt_tokens, prompts)

    rows, pairs_out, llama_cmd, ik_cmd, lio_cmds = [], [], None, None, []
    lio_runs_all, llama_runs_all, ik_runs_all, ik_best = {}, {}, {}, {}
    probes = [machine_probes(os.path.dirname(a.lio), files["Q4_1"], a.threads)]
    for dtype in weights:
        model = files[dtype]
        weight_bytes = lio_json(a.lio, "info", "--model", model, "--json")["weight_bytes"]
        n_weights = matrix_weights(model)
        lio_runs = lio_runs_all[dtype] = {c: [] for c in concurrency}
        llama_runs = llama_runs_all[dtype] = {c: [] for c in concurrency}
        ik_runs = ik_runs_all[dtype] = {c: {rtr: [] for rtr in IK_REPACK} for c in concurrency}
        for rep in range(a.repeats):
            # The engines alternate at every point (LIO, then llama.cpp at the same C: A B A B), so
            # that drift (thermal, neighbours) hits both and each repeat gives one adjacent pair.
            for c in concurrency:
                n_req = n_requests(c)
                s = run_lio(a, model, prompts, c, n_req)
                lio_runs[c].append(s)
                line = (f"[{dtype} rep {rep + 1}/{a.repeats} C={c}] LIO {s['output_tok_per_s']:.1f} out tok/s, "
                        f"{s['decode_tok_per_s']:.1f} decode tok/s, TPOT {s['median_tpot_ms']:.1f} ms")
                pair = {"weights": dtype, "concurrency": c, "repeat": rep + 1,
                        "lio": {k: s[k] for k in ("output_tok_per_s", "decode_tok_per_s", "median_tpot_ms",
                                                  "median_ttft_ms", "total_s")}}
                if not a.skip_llama:
                    res, llama_cmd = run_llama(a, model, [c])
                    llama_runs[c].append(res[c])
                    line += (f"; llama.cpp {c * a.gen_tokens / res[c]['T s']:.1f} out tok/s, "
                             f"{res[c]['S_TG t/s']:.1f} decode tok/s")
                    pair["llama.cpp"] = res[c]
                if ik:
                    pair["ik_llama.cpp"] = {}
                    for rtr in IK_REPACK:
                        res, ik_cmd = run_llama(a, model, [c], a.ik_bench,
                                                 list(IK_ARGS) + (["--run-time-repack"] if rtr else []))
                        ik_runs[c][rtr].append(res[c])
                        pair["ik_llama.cpp"][str(rtr)] = res[c]
                        line += f"; ik -rtr {rtr} {res[c]['S_TG t/s']:.1f} decode tok/s"
                pairs_out.append(pair)
                print(line, flush=True)
        for c in concurrency:
            runs = lio_runs[c]
            steps_per_s = med([s["n_decode_steps"] / s["decode_s"] for s in runs if s.get("decode_s")])
            lio = {"output_tok_s": [s["output_tok_per_s"] for s in runs],
                   "decode_tok_s": [s["decode_tok_per_s"] for s in runs],
                   "median_tpot_ms": [s["median_tpot_ms"] for s in runs]}
            row = dict(engine="lio", weights=dtype, concurrency=c, n_requests=n_requests(c), repeats=len(runs))
            for k in SPREAD_KEYS:
                row[k], row[k + "_min"], row[k + "_max"] = spread(lio[k])
            row.update(total_tok_s=med([s["total_tok_per_s"] for s in runs]),
                       median_ttft_ms=med([s["median_ttft_ms"] for s in runs]),
                       weight_gbs=weight_bytes * steps_per_s / 1e9,
                       n_preemptions=max(s["n_preemptions"] for s in runs), rtr=None)
            rows.append(row)
            peers = []
            if not a.skip_llama:
                peers.append(("llama.cpp", llama_runs[c], None))
            if ik:  # ik_llama.cpp's better --run-time-repack setting at this point, by median S_TG
                best = ik_best[dtype, c] = max(IK_REPACK, key=lambda rtr: med([r["S_TG t/s"] for r in ik_runs[c][rtr]]))
                peers.append(("ik_llama.cpp", ik_runs[c][best], best))
            for engine, lr, rtr in peers:
                ll = {"output_tok_s": [c * a.gen_tokens / r["T s"] for r in lr],
                      "decode_tok_s": [r["S_TG t/s"] for r in lr],
                      "median_tpot_ms": [1000 * r["T_TG s"] / a.gen_tokens for r in lr]}
                row = dict(engine=engine, weights=dtype, concurrency=c, n_requests=c, repeats=len(lr))
                for k in SPREAD_KEYS:
                    row[k], row[k + "_min"], row[k + "_max"] = spread(ll[k])
                row.update(total_tok_s=med([r["S t/s"] for r in lr]), median_ttft_ms=float("nan"),
                           weight_gbs=weight_bytes * med([a.gen_tokens / r["T_TG s"] for r in lr]) / 1e9,
                           n_preemptions=0, rtr=rtr)
                rows.append(row)
        for row in rows:  # achieved decode ops: 2 per matrix weight per generated token
            if row["weights"] == dtype:
                row["decode_gops"] = 2 * n_weights * row["decode_tok_s"] / 1e9 if n_weights else float("nan")
    probes.append(machine_probes(os.path.dirname(a.lio), files["Q4_1"], a.threads))
    probe = {k: med([p[k] for p in probes if p.get(k) is not None]) for k in NUMERIC_PROBE_KEYS}
    probe["compute_peak_isa"] = next((p["compute_peak_isa"] for p in probes if p.get("compute_peak_isa")), None)
    bandwidth = probe["read_bandwidth_gbs"] if probe["read_bandwidth_gbs"] == probe["read_bandwidth_gbs"] else None
    # one run per point: the command with C for its -npl and its -c (ik's: with --run-time-repack as [..])
    if llama_cmd:
        llama_cmd = re.sub(r" -c \d+ ", f" -c C*({a.prompt_tokens}+{a.gen_tokens})+64 ", llama_cmd)
        llama_cmd = re.sub(r" -npl \d+ ", " -npl C ", llama_cmd)
    if ik_cmd:
        ik_cmd = re.sub(r" -c \d+ ", f" -c C*({a.prompt_tokens}+{a.gen_tokens})+64 ", ik_cmd)
        ik_cmd = re.sub(r" -npl \d+ ", " -npl C ", ik_cmd).replace(" --run-time-repack", "") + " [--run-time-repack]"
    elapsed_min = (time.time() - t_start) / 60
    load_end = os.getloadavg()[0]
    lio_cmds.append(f"{os.path.relpath(a.lio, ROOT)} batch --model MODEL --prompts PROMPTS.jsonl --max-tokens {a.gen_tokens} "
                    f"--ignore-eos --temperature 0 --max-num-seqs C --max-num-batched-tokens {a.batched_tokens} "
                    f"--threads {a.threads} --summary S.json" + (f" {a.lio_args}" if a.lio_args else ""))

    # ---- table: ratios LIO / llama.cpp and LIO C / C=1 ----
    def paired(dtype, c, lio_key, llama_fn):
        """[(lio, llama)] per repeat at one point: the adjacent runs of each repeat."""
        return [(s[lio_key], llama_fn(c, r)) for s, r in zip(lio_runs_all[dtype][c], llama_runs_all[dtype][c])]

    def paired_ik(dtype, c, lio_key, ik_fn):
        """The same against ik_llama.cpp's better -rtr at the point (its run in the same repeat)."""
        theirs = ik_runs_all[dtype][c][ik_best[dtype, c]]
        return [(s[lio_key], ik_fn(c, r)) for s, r in zip(lio_runs_all[dtype][c], theirs)]

    def lio_activations(dtype):
        """The activations LIO's matmuls ran with: --lio-args' --activations, else lio's default
        (int8 on quantized weights, f32 on F32)."""
        m = re.search(r"--activations[ =](\w+)", a.lio_args)
        return "f32" if dtype == "F32" else (m.group(1) if m else "int8")

    def peak_of(dtype):
        """The compute probe's peak for LIO's arithmetic on `dtype` (GOP/s), NaN when not probed."""
        key = "compute_peak_int8_gops" if lio_activations(dtype) == "int8" else "compute_peak_f32_gflops"
        return probe.get(key, float("nan"))

    def get(engine, dtype, c, key):
        for r in rows:
            if r["engine"] == engine and r["weights"] == dtype and r["concurrency"] == c:
                return r[key]
        return float("nan")

    table = []
    for dtype in weights:
        for c in concurrency:
            lo, ld = get("lio", dtype, c, "output_tok_s"), get("lio", dtype, c, "decode_tok_s")
            qo, qd = get("llama.cpp", dtype, c, "output_tok_s"), get("llama.cpp", dtype, c, "decode_tok_s")
            out_r = ratio_spread(paired(dtype, c, "output_tok_per_s", lambda c, r: c * a.gen_tokens / r["T s"]))
            dec_r = ratio_spread(paired(dtype, c, "decode_tok_per_s", lambda c, r: r["S_TG t/s"]))
            table.append(dict(weights=dtype, c=c, lio_out=lo, lio_out_min=get("lio", dtype, c, "output_tok_s_min"),
                              lio_out_max=get("lio", dtype, c, "output_tok_s_max"), llama_out=qo,
                              llama_out_min=get("llama.cpp", dtype, c, "output_tok_s_min"),
                              llama_out_max=get("llama.cpp", dtype, c, "output_tok_s_max"),
                              out_ratio=out_r[0], out_ratio_min=out_r[1], out_ratio_max=out_r[2], out_tie=out_r[3],
                              lio_dec=ld, lio_dec_min=get("lio", dtype, c, "decode_tok_s_min"),
                              lio_dec_max=get("lio", dtype, c, "decode_tok_s_max"), llama_dec=qd,
                              llama_dec_min=get("llama.cpp", dtype, c, "decode_tok_s_min"),
                              llama_dec_max=get("llama.cpp", dtype, c, "decode_tok_s_max"),
                              dec_ratio=dec_r[0], dec_ratio_min=dec_r[1], dec_ratio_max=dec_r[2], dec_tie=dec_r[3],
                              lio_vs_c1=ld / get("lio", dtype, concurrency[0], "decode_tok_s"),
                              llama_vs_c1=qd / get("llama.cpp", dtype, concurrency[0], "decode_tok_s"),
                              lio_tpot=get("lio", dtype, c, "median_tpot_ms"),
                              llama_tpot=get("llama.cpp", dtype, c, "median_tpot_ms"),
                              lio_gbs=get("lio", dtype, c, "weight_gbs"), llama_gbs=get("llama.cpp", dtype, c, "weight_gbs"),
                              preempt=get("lio", dtype, c, "n_preemptions"),
                              activations=lio_activations(dtype), lio_gops=get("lio", dtype, c, "decode_gops"),
                              llama_gops=get("llama.cpp", dtype, c, "decode_gops"),
                              peak_gops=peak_of(dtype)))
            if ik:
                io = ratio_spread(paired_ik(dtype, c, "output_tok_per_s", lambda c, r: c * a.gen_tokens / r["T s"]))
                idr = ratio_spread(paired_ik(dtype, c, "decode_tok_per_s", lambda c, r: r["S_TG t/s"]))
                table[-1].update(ik_rtr=ik_best[dtype, c], ik_out=get("ik_llama.cpp", dtype, c, "output_tok_s"),
                                 ik_out_min=get("ik_llama.cpp", dtype, c, "output_tok_s_min"),
                                 ik_out_max=get("ik_llama.cpp", dtype, c, "output_tok_s_max"),
                                 ik_dec=get("ik_llama.cpp", dtype, c, "decode_tok_s"),
                                 ik_dec_min=get("ik_llama.cpp", dtype, c, "decode_tok_s_min"),
                                 ik_dec_max=get("ik_llama.cpp", dtype, c, "decode_tok_s_max"),
                                 out_ratio_ik=io[0], out_ratio_ik_min=io[1], out_ratio_ik_max=io[2], out_tie_ik=io[3],
                                 dec_ratio_ik=idr[0], dec_ratio_ik_min=idr[1], dec_ratio_ik_max=idr[2],
                                 dec_tie_ik=idr[3], ik_gops=get("ik_llama.cpp", dtype, c, "decode_gops"))
    header = ("| weights | C | out tok/s LIO | llama.cpp | LIO/llama | decode tok/s LIO | llama.cpp | LIO/llama "
              "| LIO C/C=1 | llama C/C=1 | TPOT ms LIO | llama.cpp | weight GB/s LIO | llama.cpp | preempt |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for t in table:
        lines.append(f"| {t['weights']} | {t['c']} | {fmt_cell(t['lio_out'], t['lio_out_min'], t['lio_out_max'])} | "
                     f"{fmt_cell(t['llama_out'], t['llama_out_min'], t['llama_out_max'])} | "
                     f"{fmt_ratio(t['out_ratio'], t['out_ratio_min'], t['out_ratio_max'], t['out_tie'])} | "
                     f"{fmt_cell(t['lio_dec'], t['lio_dec_min'], t['lio_dec_max'])} | "
                     f"{fmt_cell(t['llama_dec'], t['llama_dec_min'], t['llama_dec_max'])} | "
                     f"{fmt_ratio(t['dec_ratio'], t['dec_ratio_min'], t['dec_ratio_max'], t['dec_tie'])} | "
                     f"{t['lio_vs_c1']:.2f} | {t['llama_vs_c1']:.2f} | {t['lio_tpot']:.1f} | {t['llama_tpot']:.1f} | "
                     f"{t['lio_gbs']:.1f} | {t['llama_gbs']:.1f} | {t['preempt']} |")
    # ---- the second table: ik_llama.cpp, and the decode ops each engine achieved against the peak ----
    header2 = ("| weights | C | " + ("out tok/s ik_llama.cpp | LIO/ik | decode tok/s ik_llama.cpp | LIO/ik | " if ik else "")
               + "LIO activations | decode GOP/s LIO | % of the peak | llama.cpp GOP/s |" + (" ik GOP/s |" if ik else ""))
    lines2 = [header2, "|" + "---|" * (header2.count("|") - 1)]
    for t in table:
        ik_cells = ""
        if ik:
            ik_cells = (f"{fmt_cell(t['ik_out'], t['ik_out_min'], t['ik_out_max'])} (rtr {t['ik_rtr']}) | "
                        f"{fmt_ratio(t['out_ratio_ik'], t['out_ratio_ik_min'], t['out_ratio_ik_max'], t['out_tie_ik'])} | "
                        f"{fmt_cell(t['ik_dec'], t['ik_dec_min'], t['ik_dec_max'])} (rtr {t['ik_rtr']}) | "
                        f"{fmt_ratio(t['dec_ratio_ik'], t['dec_ratio_ik_min'], t['dec_ratio_ik_max'], t['dec_tie_ik'])} | ")
        lines2.append(f"| {t['weights']} | {t['c']} | {ik_cells}{t['activations']} | {t['lio_gops']:.1f} | "
                      f"{100 * t['lio_gops'] / t['peak_gops']:.0f}% | "
                      f"{t['llama_gops']:.1f} |"
                      + (f" {t['ik_gops']:.1f} |" if ik else ""))
    print("\n".join(lines + [""] + lines2))

    targets = []
    if a.device == "cuda":
        # Issue 45's goals: decode at 64 sequences >= 2x the 11,711 tok/s of the first GPU run
        # (bench/results/cuda_h100_validation.md) and >= 1.5x llama-batched-bench's S_TG.
        t = next((t for t in table if t["c"] == 64), None)
        if t is None:
            targets.append("- not evaluated (needs C=64 in the run)")
        else:
            vs = fmt_ratio(t["dec_ratio"], t["dec_ratio_min"], t["dec_ratio_max"], t["dec_tie"])
            targets.append(f"- decode at C=64: {t['lio_dec']:.0f} tok/s (target >= {2 * 11711}: "
                           f"**{'met' if t['lio_dec'] >= 2 * 11711 else 'missed'}**); {vs}x llama.cpp's S_TG "
                           f"(target >= 1.5x: **{'met' if t['dec_ratio'] >= 1.5 else 'missed'}**)")
    elif TARGET_C in concurrency and concurrency[0] == 1:
        for dtype in weights:
            t = next(t for t in table if t["weights"] == dtype and t["c"] == TARGET_C)
            ok1 = t["lio_vs_c1"] >= TARGET_VS_C1
            ok2 = t["dec_ratio"] >= TARGET_VS_LLAMA
            vs = fmt_ratio(t["dec_ratio"], t["dec_ratio_min"], t["dec_ratio_max"], t["dec_tie"])
            targets.append(f"- {dtype}: LIO decode at C={TARGET_C} is {t['lio_vs_c1']:.2f}x its C=1 "
                           f"(target >= {TARGET_VS_C1}x): **{'met' if ok1 else 'missed'}**; "
                           f"{vs}x llama.cpp's, median [min–max] of the per-repeat ratios (target >= "
                           f"{TARGET_VS_LLAMA}x): **{'met' if ok2 else 'missed'}**"
                           + (" (the median; the range does not clear it)" if ok2 and t["dec_ratio_min"] < TARGET_VS_LLAMA
                              else "")
                           + (f"; {fmt_ratio(t['dec_ratio_ik'], t['dec_ratio_ik_min'], t['dec_ratio_ik_max'], t['dec_tie_ik'])}x "
                              f"ik_llama.cpp's (target >= {TARGET_VS_IK}x): "
                              f"**{'met' if t['dec_ratio_ik'] >= TARGET_VS_IK else 'missed'}**" if ik else "")
                           + f"; {t['lio_gops']:.0f} GOP/s, {100 * t['lio_gops'] / t['peak_gops']:.0f}% of the "
                             f"{t['activations']} compute probe's {t['peak_gops']:.0f}")
    else:
        targets.append(f"- not evaluated (needs C=1 and C={TARGET_C} in the run)")
    print("\n".join(targets))

    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    write_csv(a.out + ".csv", rows)
    with open(a.out + ".json", "w") as f:
        json.dump({"provenance": prov, "threads": a.threads, "repeats": a.repeats, "min_repeats_rule": MIN_REPEATS,
                   "interleaving": "per point: LIO then llama.cpp" + (" then ik_llama.cpp -rtr 0 and 1" if ik else "")
                                   + " at the same C, every repeat (A B A B)",
                   "prompt_tokens": a.prompt_tokens,
                   "gen_tokens": a.gen_tokens, "lio_cmd": local_path_free(lio_cmds[0]),
                   "llama_cmd": local_path_free(llama_cmd or ""), "ik_cmd": local_path_free(ik_cmd or ""),
                   "read_bandwidth_gbs": bandwidth, "probes": probe,
                   "rows": [no_nan(r) for r in rows], "table": [no_nan(t) for t in table],
                   "repeat_pairs": pairs_out}, f, indent=2)
        f.write("\n")
    try:
        write_plot(a.out + ".png", rows, concurrency, a.prompt_tokens, a.gen_tokens)
        plotted = True
    except ImportError:  # a GPU image without matplotlib: the table and the JSON still stand
        plotted = False
    cpu = (f"{machine['cpu']}, {machine['cpus']} logical CPUs ({machine.get('threads_per_core', '?')} per core), "
           f"{machine.get('mem_gib', '?')} GiB, {machine['arch']}")
    bw = f"{bandwidth:.1f} GB/s (bench_decode's probe, same run)" if bandwidth else "not measured (no bench_decode)"
    with open(a.out + ".md", "w") as f:
        f.write("# Offline batched throughput: LIO vs llama.cpp" + (" and ik_llama.cpp" if ik else "")
                + (f" on {gpu['gpu']}" if gpu else "") + "\n\n")
        f.write("\n".join(provenance_lines(prov)) + "\n")
        if gpu:
            f.write(f"- GPU: {gpu['gpu']}, driver {gpu['driver']}; both engines run every layer on it "
                    f"(LIO `{a.lio_args}`, llama.cpp `{a.llama_args}`)\n")
        f.write(f"- CPUs (lscpu): {cpu}; {a.threads} threads for every engine; read bandwidth {bw}\n")
        if probe.get("compute_peak_isa"):
            f.write(f"- Compute peak (bench_decode's probe at the run's start and end, {a.threads} threads, "
                    f"{probe['compute_peak_isa']}): f32 {probe['compute_peak_f32_gflops']:.0f} GFLOP/s, int8 "
                    f"{probe['compute_peak_int8_gops']:.0f} GOP/s (medians). Decode GOP/s = 2 x the matrix weights "
                    "(every 2-D tensor a step multiplies, counted from the GGUF file) x decode tok/s, against the "
                    "peak of the arithmetic LIO ran (its activations column)\n")
        f.write(f"- LIO's matmul activations: `{a.lio_args or 'lio batch defaults'}` -> "
                + ", ".join(f"{d}: {lio_activations(d)}" for d in weights) + "\n")
        if ik:
            f.write("- ik_llama.cpp (`bench/batched/build_llama_tools.sh --ik`: ik-llama-cpp-python's vendored "
                    "sources, the fork built for CPU speed): its `llama-batched-bench` with the same flags, run with "
                    "`--run-time-repack` off and on at every point of every repeat; a cell is its better setting at "
                    "that point by median S_TG (named rtr 0 / 1); `-fa 0`, because its flash attention stops at "
                    "`GGML_ASSERT(S > 0)` (iqk_fa_templates.h:1157) with more than one sequence in these sources; "
                    "f16 KV, its default\n")
        f.write("- Model: SmolLM2-135M-Instruct, as shipped (Q4_1, token_embd Q8_0) and an F32 copy made with "
                "llama.cpp's quantize API\n")
        f.write(f"- Workload: prompts of exactly {a.prompt_tokens} tokens (distinct windows of the repo's docs), "
                f"{a.gen_tokens} generated tokens each, greedy, EOS ignored. LIO: min({a.requests}, {a.waves} x C) "
                f"requests per point (at least C; {', '.join(f'C={c}: {n_requests(c)}' for c in concurrency)}), "
                f"all queued at once, `--max-num-seqs C --max-num-batched-tokens {a.batched_tokens}`, "
                "KV pool at its default budget (f32). llama.cpp: `llama-batched-bench`, C sequences prefilled "
                "together then decoded together (`-npl C`; its KV cache is f16 by default).\n")
        f.write(f"- Load average (1 min): {load_start:.2f} before the run (~0 = an idle machine), "
                f"{load_end:.2f} at its end (our own {a.threads} threads alone make ~{a.threads})\n")
        f.write(f"- Repeats: {a.repeats} per point, LIO and llama.cpp alternating at every point (A B A B); total "
                f"run {elapsed_min:.1f} min{' (--quick smoke run)' if a.quick else ''}, i.e. "
                f"~{elapsed_min / a.repeats:.1f} min per sweep of both engines. Each cell: median [min–max] over "
                "the repeats; LIO/llama: median [min–max] of the per-repeat ratios (adjacent runs), \"tie\" when "
                "that range holds 1 (the run does not tell the engines apart)."
                + (f" **Below the rule**: COURSE.md asks for at least {MIN_REPEATS} repeats before a ratio is "
                   "called a win, a loss or a tie." if below_rule else "") + "\n")
        f.write("- Output tok/s = generated tokens / wall time from the first request queued to the last "
                "finished (prefill included). Decode tok/s: LIO over its steps that ran no prompt row; "
                "llama.cpp's S_TG. TPOT = mean time between a request's tokens (llama.cpp: T_TG / ntg). "
                "Weight GB/s = weight bytes x decode steps/s.\n")
        f.write("- Not quite the same experiment: LIO runs min(requests, waves x C) requests through continuous "
                "batching, so when C is close to the request count its decode-only steps include a tail with "
                "fewer than C sequences (the first requests prefilled finish first); llama-batched-bench's "
                "decode phase always holds exactly C. LIO's pool is f32, llama.cpp's KV cache f16.\n")
        f.write(f"- The command above runs, at each point C\n  - `{local_path_free(lio_cmds[0])}`\n")
        if llama_cmd:
            f.write(f"  - `{llama_cmd}`\n")
        if ik_cmd:
            f.write(f"  - `{local_path_free(ik_cmd)}`\n")
        f.write("\n" + "\n".join(lines) + "\n\n" + "\n".join(lines2) + "\n\n")
        f.write(f"Targets (at C={64 if gpu else TARGET_C}):\n" + "\n".join(targets) + "\n")
        if plotted:
            f.write(f"\n![throughput]({os.path.basename(a.out)}.png)\n")
    print(f"wrote {a.out}.csv, .md, .png ({elapsed_min:.1f} min)")


if __name__ == "__main__":
    main()
