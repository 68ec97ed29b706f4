#!/usr/bin/env python3
"""Renders ch03_quantization's --json output as the Markdown table of bench/results
(stdout). Usage: table.py RESULT.json"""
import json
import sys


def cell(v, fmt):
    return "-" if v is None else fmt.format(v)


def main(path):
    d = json.load(open(path))
    prov = d.get("provenance")
    if prov:  # command, commit, machine, date (bench/liobench/results_meta.py)
        from liobench.results_meta import provenance_lines
        print("\n".join(provenance_lines(prov)))
    print(f'- Device: {d["device"]}; reference `{d["reference"]}`')
    print(f'- Perplexity: `{d["text"]}`, {d["ppl_chunks"]} chunks of {d["ppl_ctx"]} tokens (llama-perplexity\'s '
          f'procedure); KL and top-1 over its first {d["eval_tokens"]} tokens; decode at context {d["context"]}, '
          f'prefill of {d["prefill_tokens"]} tokens')
    print(f'- Variants made by `lio quantize` from the reference, keeping `{d["keep"] or "nothing"}`; GPTQ / AWQ '
          f'calibrated on `{d["calib"]}`, {d["calib_chunks"]} chunks of {d["calib_ctx"]} tokens')
    print()
    print("| variant | grid | weight MiB | bits/w stored | KV B/token | err / RTN | decode b1 tok/s | decode b32 "
          "| prefill tok/s | perplexity | mean KL | top-1 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for v in d["variants"]:
        print(f'| {v["variant"]} | {v["grid"]} | {v["weight_bytes"] / 2**20:.1f} | {v["bits_per_weight"]:.2f} | '
              f'{cell(v.get("kv_bytes_per_token"), "{:,}")} | {cell(v["output_error_vs_rtn"], "{:.3f}")} | {cell(v["decode_tokens_per_s_b1"], "{:.1f}")} | '
              f'{cell(v["decode_tokens_per_s_b32"], "{:.1f}")} | {cell(v["prefill_tokens_per_s"], "{:.1f}")} | '
              f'{v["perplexity"]:.3f} ± {v["perplexity_uncertainty"]:.2f} | {v["mean_kl"]:.4f} | '
              f'{100 * v["top1_agreement"]:.1f}% |')


if __name__ == "__main__":
    main(sys.argv[1])
