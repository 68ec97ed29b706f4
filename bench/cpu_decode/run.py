#!/usr/bin/env python3
"""Batch-1 CPU prefill and decode: LIO vs llama.cpp on the same GGUF files, in one run.

Files: the Q4_1 model as shipped, and an F32 copy made with llama.cpp's own quantize API
(llama_model_quantize, ftype ALL_F32, allow_requantize). For each file and engine: prefill
tokens/s on a P-token prompt and decode tokens/s over N steps. LIO's numbers come from
build/bin/bench_decode (which also measures the read bandwidth); llama.cpp's from
llama-cpp-python's eval(). Achieved GB/s = weight bytes x decode tokens/s, for both engines over
the same byte count (LIO's, from the same file).

Repeats and ties (COURSE.md, "Performance method"): for each file the engines alternate, LIO then
llama.cpp, --repeats times (default 5; A B A B), so drift on a shared machine hits both. One LIO
repeat is one `bench_decode --repeats 1` process (its own warm-up pass, then one timed pass); one
llama.cpp repeat is one timed pass of a model loaded once and warmed up once before the first.
Each repeat gives one ratio LIO / llama.cpp from its adjacent pair; the report gives each engine's
median and min-max and the ratios' median and min-max, and says "tie" when that range holds 1.

Writes bench/results/cpu_decode.csv, .json and .md; the .json and .md record the command, commit,
machine and date (bench/common/results_meta.py), with no local paths. The .csv keeps the columns
of earlier runs (medians; the ratios are now medians of the per-repeat ratios) and adds _min /
_max columns and the tie flags; the .json adds every repeat's values.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "bench", "common"))
from make_f32_copy import make_f32_copy  # noqa: E402
from results_meta import provenance, provenance_lines  # noqa: E402

MIN_REPEATS = 5  # COURSE.md: peer comparisons repeat at least this many times


class LlamaBench:
    """llama.cpp through llama-cpp-python: the model loaded and warmed up once, then one timed
    pass (prefill, then greedy decode) per call."""

    def __init__(self, model, prompt_tokens, decode_tokens, threads):
        from llama_cpp import Llama

        self.llm = Llama(model_path=model, n_ctx=prompt_tokens + decode_tokens + 8, n_batch=512,
                         n_threads=threads, n_threads_batch=threads, verbose=False)
        text = ("The quick brown fox jumps over the lazy dog while the engine measures how fast it can read "
                "its weights from memory, one token at a time. ")
        base = self.llm.tokenize(text.encode(), add_bos=False, special=False)
        self.prompt = (base * (prompt_tokens // len(base) + 1))[:prompt_tokens]
        self.decode_tokens = decode_tokens
        self.run()  # warm-up, not recorded

    def run(self):
        """(prefill tok/s, decode tok/s) of one pass."""
        llm = self.llm
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(self.prompt)
        t_pre = time.perf_counter() - t0
        tok = int(llm.scores[llm.n_tokens - 1].argmax())
        t0 = time.perf_counter()
        for _ in range(self.decode_tokens):
            llm.eval([tok])
            tok = int(llm.scores[llm.n_tokens - 1].argmax())
        t_dec = time.perf_counter() - t0
        return len(self.prompt) / t_pre, self.decode_tokens / t_dec


def run_lio(a, path):
    """One bench_decode process (a warm-up pass, then one timed pass); its JSON."""
    out = subprocess.run([os.path.join(a.bin, "bench_decode"), "--model", path, "--json",
                          "--prompt-tokens", str(a.prompt_tokens), "--decode-tokens", str(a.decode_tokens),
                          "--repeats", "1", "--threads", str(a.threads)],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)


def spread(values):
    return statistics.median(values), min(values), max(values)


def ratio_spread(pairs):
    """Median, min, max of the per-repeat ratios lio / llama, and the tie flag (range holds 1)."""
    r = spread([x / y for x, y in pairs])
    return r + (r[1] <= 1.0 <= r[2],)


def cell(row, key, digits=1):
    """'median [min–max]' of a row's metric."""
    return f"{row[key]:.{digits}f} [{row[key + '_min']:.{digits}f}–{row[key + '_max']:.{digits}f}]"


def ratio_cell(row, key):
    text = cell(row, key, 2)
    return f"tie ({text})" if row[key.replace("ratio", "tie")] else text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/bin"))
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=MIN_REPEATS,
                    help=f"interleaved LIO / llama.cpp pairs per file (COURSE.md: >= {MIN_REPEATS})")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/cpu_decode"))
    a = ap.parse_args()
    below_rule = a.repeats < MIN_REPEATS
    if below_rule:
        print(f"warning: --repeats {a.repeats}: COURSE.md asks for at least {MIN_REPEATS} to call a ratio "
              "(a win, a loss or a tie); this run is below the rule", file=sys.stderr)
    prov = provenance()
    f32 = os.path.join(os.path.dirname(a.model), "SmolLM2-135M-Instruct.F32.gguf")
    make_f32_copy(a.model, f32)

    rows, per_repeat = [], []
    for label, path in (("Q4_1", a.model), ("F32", f32)):
        llama = LlamaBench(path, a.prompt_tokens, a.decode_tokens, a.threads)
        runs = []
        for rep in range(a.repeats):  # A B A B: LIO, then llama.cpp, each repeat
            ours = run_lio(a, path)
            pre_l, dec_l = llama.run()
            runs.append(dict(repeat=rep + 1, lio_prefill_tps=ours["prefill_tokens_per_s"],
                             lio_decode_tps=ours["decode_tokens_per_s"], llama_prefill_tps=pre_l,
                             llama_decode_tps=dec_l, read_bw_gbs=ours["read_bandwidth_gbs"],
                             weight_bytes=ours["weight_bytes"]))
            print(f"{label} repeat {rep + 1}/{a.repeats}: prefill {runs[-1]['lio_prefill_tps']:.1f} / {pre_l:.1f}, "
                  f"decode {runs[-1]['lio_decode_tps']:.1f} / {dec_l:.1f} tok/s (LIO / llama.cpp)", flush=True)
        del llama
        per_repeat.append({"weights": label, "runs": runs})
        wb = runs[0]["weight_bytes"]
        bw = statistics.median(r["read_bw_gbs"] for r in runs) * 1e9
        row = dict(weights=label, weight_mib=wb / 2**20, read_bw_gbs=bw / 1e9)
        for key in ("lio_prefill_tps", "llama_prefill_tps", "lio_decode_tps", "llama_decode_tps"):
            row[key], row[key + "_min"], row[key + "_max"] = spread([r[key] for r in runs])
        lio_dec, llama_dec = row["lio_decode_tps"], row["llama_decode_tps"]
        row.update(lio_decode_gbs=wb * lio_dec / 1e9, llama_decode_gbs=wb * llama_dec / 1e9,
                   lio_pct_bw=100 * wb * lio_dec / bw, llama_pct_bw=100 * wb * llama_dec / bw)
        for phase in ("decode", "prefill"):
            (row[f"{phase}_ratio"], row[f"{phase}_ratio_min"], row[f"{phase}_ratio_max"],
             row[f"{phase}_tie"]) = ratio_spread([(r[f"lio_{phase}_tps"], r[f"llama_{phase}_tps"]) for r in runs])
        row["repeats"] = a.repeats
        rows.append(row)
        print(json.dumps(rows[-1], indent=1), flush=True)

    import llama_cpp
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out + ".csv", "w") as f:
        f.write(",".join(rows[0].keys()) + "\n")
        for r in rows:
            f.write(",".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in r.values()) + "\n")
    with open(a.out + ".json", "w") as f:
        json.dump({"provenance": prov, "threads": a.threads, "llama_cpp_python": llama_cpp.__version__,
                   "prompt_tokens": a.prompt_tokens, "decode_tokens": a.decode_tokens, "repeats": a.repeats,
                   "min_repeats_rule": MIN_REPEATS,
                   "interleaving": "per file: LIO then llama.cpp, every repeat (A B A B)",
                   "rows": rows, "per_repeat": per_repeat}, f, indent=2)
        f.write("\n")
    with open(a.out + ".md", "w") as f:
        f.write("# CPU batch-1 prefill and decode: LIO vs llama.cpp\n\n")
        f.write("\n".join(provenance_lines(prov)) + "\n")
        f.write(f"- Threads: {a.threads} for both engines; peer: llama-cpp-python {llama_cpp.__version__}\n- Model: SmolLM2-135M-Instruct, as shipped (Q4_1, token_embd Q8_0) and an "
                "F32 copy made with llama.cpp's quantize API\n")
        f.write(f"- Settings: prompt {a.prompt_tokens} tokens, decode {a.decode_tokens} tokens; read bandwidth "
                "measured in the same run by bench_decode (median over its processes)\n")
        f.write(f"- Peer rule (COURSE.md): {a.repeats} repeats per file, LIO and llama.cpp alternating (A B A B; "
                "LIO one bench_decode process per repeat with its own warm-up, llama.cpp one pass of a model "
                "warmed up once). Each cell: median [min–max] tok/s; ratio: median [min–max] of the per-repeat "
                "ratios LIO / llama.cpp (above 1: LIO faster), \"tie\" when that range holds 1."
                + (f" **Below the rule**: COURSE.md asks for at least {MIN_REPEATS} repeats before a ratio is "
                   "called a win, a loss or a tie." if below_rule else "") + "\n\n")
        f.write("| weights | MiB | read GB/s | prefill tok/s LIO | llama.cpp | ratio | decode tok/s LIO | llama.cpp "
                "| ratio | LIO GB/s (% of bw) | llama.cpp GB/s (% of bw) |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write(f"| {r['weights']} | {r['weight_mib']:.1f} | {r['read_bw_gbs']:.2f} | {cell(r, 'lio_prefill_tps')} | "
                    f"{cell(r, 'llama_prefill_tps')} | {ratio_cell(r, 'prefill_ratio')} | {cell(r, 'lio_decode_tps')} | "
                    f"{cell(r, 'llama_decode_tps')} | {ratio_cell(r, 'decode_ratio')} | {r['lio_decode_gbs']:.2f} "
                    f"({r['lio_pct_bw']:.0f}%) | {r['llama_decode_gbs']:.2f} ({r['llama_pct_bw']:.0f}%) |\n")
    print(f"wrote {a.out}.csv, .json and .md")


if __name__ == "__main__":
    main()
