#!/usr/bin/env python3
"""Batch-1 CPU prefill and decode: LIO vs llama.cpp on the same GGUF files, in one run.

Files: the Q4_1 model as shipped, and an F32 copy made with llama.cpp's own quantize API
(llama_model_quantize, ftype ALL_F32, allow_requantize). For each file and engine: prefill
tokens/s on a P-token prompt and decode tokens/s over N steps, median of R repeats (after
one warm-up). LIO's numbers come from build/bin/bench_decode (which also measures the read
bandwidth); llama.cpp's from llama-cpp-python's eval(). Achieved GB/s = weight bytes x
decode tokens/s, for both engines over the same byte count (LIO's, from the same file).

Writes bench/results/cpu_decode.csv, .json and .md; the .json and .md record the command, commit,
machine and date (bench/common/results_meta.py), with no local paths.
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


def bench_llama(model, prompt_tokens, decode_tokens, repeats, threads):
    from llama_cpp import Llama

    llm = Llama(model_path=model, n_ctx=prompt_tokens + decode_tokens + 8, n_batch=512,
                n_threads=threads, n_threads_batch=threads, verbose=False)
    text = ("The quick brown fox jumps over the lazy dog while the engine measures how fast it can read "
            "its weights from memory, one token at a time. ")
    base = llm.tokenize(text.encode(), add_bos=False, special=False)
    prompt = (base * (prompt_tokens // len(base) + 1))[:prompt_tokens]
    pre, dec = [], []
    for r in range(repeats + 1):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        t_pre = time.perf_counter() - t0
        tok = int(llm.scores[llm.n_tokens - 1].argmax())
        t0 = time.perf_counter()
        for _ in range(decode_tokens):
            llm.eval([tok])
            tok = int(llm.scores[llm.n_tokens - 1].argmax())
        t_dec = time.perf_counter() - t0
        if r:
            pre.append(prompt_tokens / t_pre)
            dec.append(decode_tokens / t_dec)
    return statistics.median(pre), statistics.median(dec)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/bin"))
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/cpu_decode"))
    a = ap.parse_args()
    prov = provenance()
    f32 = os.path.join(os.path.dirname(a.model), "SmolLM2-135M-Instruct.F32.gguf")
    make_f32_copy(a.model, f32)

    rows = []
    for label, path in (("Q4_1", a.model), ("F32", f32)):
        out = subprocess.run([os.path.join(a.bin, "bench_decode"), "--model", path, "--json",
                              "--prompt-tokens", str(a.prompt_tokens), "--decode-tokens", str(a.decode_tokens),
                              "--repeats", str(a.repeats), "--threads", str(a.threads)],
                             check=True, stdout=subprocess.PIPE, text=True).stdout
        ours = json.loads(out)
        pre_l, dec_l = bench_llama(path, a.prompt_tokens, a.decode_tokens, a.repeats, a.threads)
        wb, bw = ours["weight_bytes"], ours["read_bandwidth_gbs"] * 1e9
        rows.append(dict(
            weights=label, weight_mib=wb / 2**20, read_bw_gbs=bw / 1e9,
            lio_prefill_tps=ours["prefill_tokens_per_s"], llama_prefill_tps=pre_l,
            lio_decode_tps=ours["decode_tokens_per_s"], llama_decode_tps=dec_l,
            lio_decode_gbs=wb * ours["decode_tokens_per_s"] / 1e9, llama_decode_gbs=wb * dec_l / 1e9,
            lio_pct_bw=100 * wb * ours["decode_tokens_per_s"] / bw, llama_pct_bw=100 * wb * dec_l / bw,
            decode_ratio=ours["decode_tokens_per_s"] / dec_l, prefill_ratio=ours["prefill_tokens_per_s"] / pre_l,
        ))
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
                   "rows": rows}, f, indent=2)
        f.write("\n")
    with open(a.out + ".md", "w") as f:
        f.write("# CPU batch-1 prefill and decode: LIO vs llama.cpp\n\n")
        f.write("\n".join(provenance_lines(prov)) + "\n")
        f.write(f"- Threads: {a.threads} for both engines; peer: llama-cpp-python {llama_cpp.__version__}\n- Model: SmolLM2-135M-Instruct, as shipped (Q4_1, token_embd Q8_0) and an "
                "F32 copy made with llama.cpp's quantize API\n")
        f.write(f"- Settings: prompt {a.prompt_tokens} tokens, decode {a.decode_tokens} tokens, median of "
                f"{a.repeats} repeats after a warm-up; read bandwidth measured in the same run by bench_decode. "
                "The engines run one after the other (LIO, then llama.cpp, per file) and only medians are "
                "kept: no spread, so a ratio near 1 is not a measured win or loss\n\n")
        f.write("| weights | MiB | read GB/s | prefill tok/s LIO | llama.cpp | ratio | decode tok/s LIO | llama.cpp "
                "| ratio | LIO GB/s (% of bw) | llama.cpp GB/s (% of bw) |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write(f"| {r['weights']} | {r['weight_mib']:.1f} | {r['read_bw_gbs']:.2f} | {r['lio_prefill_tps']:.1f} | "
                    f"{r['llama_prefill_tps']:.1f} | {r['prefill_ratio']:.2f} | {r['lio_decode_tps']:.1f} | "
                    f"{r['llama_decode_tps']:.1f} | {r['decode_ratio']:.2f} | {r['lio_decode_gbs']:.2f} "
                    f"({r['lio_pct_bw']:.0f}%) | {r['llama_decode_gbs']:.2f} ({r['llama_pct_bw']:.0f}%) |\n")
    print(f"wrote {a.out}.csv, .json and .md")


if __name__ == "__main__":
    main()
