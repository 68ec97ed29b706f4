#!/usr/bin/env python3
"""Chapter 06, section 7: Medusa's typical acceptance (lossy) against the exact tree rule when
sampling - what the lossy option buys, on the default Q4_1 file, one sequence, CPU.

    .venv/bin/python bench/06_speculative/typical.py [--repeats 5] [--temperature 0.7]

The free chat prompts of drafters.py (held apart from the drafters' training prompts), sampled at
--temperature with a fixed seed per run, EOS ignored. Methods: plain sampling; Medusa's tree of 8
and EAGLE's chain of 2 (drafters.py's best greedy shapes), each with the exact rule (rejection:
SpecInfer's multi-draft rule for trees, Task 6b; Task 4 for chains) and with typical acceptance
(--spec-acceptance typical, epsilon 0.09, alpha 0.3: Medusa's defaults). Interleaved, repeated;
median (min-max) output tok/s, speedup over plain sampling (per-repeat ratios; a range holding 1
is a tie), tokens per target pass and acceptance. Exact rows sample the target's distribution;
typical rows do not (a draft the target gives p above the threshold is kept whatever its
probability, so the output leans towards the drafter's choices). Writes
bench/results/06_speculative_typical_cpu.{json,md}. Nothing here is a test.
"""
import argparse
import os
import statistics
import sys
import tempfile

import drafters
from liobench import ROOT
from liobench.results_meta import provenance, provenance_lines, write_results


def methods(heads, eagle, temperature, seed):
    sample = ["--temperature", str(temperature), "--seed", str(seed)]
    typical = ["--spec-acceptance", "typical"]
    base = dict(drafters.methods(heads, eagle))
    out = [("plain", sample)]
    for name in ("medusa tree 8", "eagle chain 2"):
        out.append((f"{name}, exact", base[name] + sample))
        out.append((f"{name}, typical", base[name] + typical + sample))
    return out


def measure(args):
    prompts = drafters.free_prompts(args.n_prompts)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "free.jsonl")
        drafters.write_chat_prompts(path, prompts)
        ms = methods(args.heads, args.eagle, args.temperature, args.seed)
        tps = {n: [] for n, _ in ms}
        last = {}
        for rep in range(args.repeats):
            for name, flags in ms:
                s, _ = drafters.run_batch(drafters.MODEL, path, 1, args.max_tokens, flags, tmp)
                tps[name].append(s["output_tok_per_s"])
                last[name] = s
                print(f"  rep {rep + 1}: {name} {s['output_tok_per_s']:.1f} tok/s", file=sys.stderr)
        for name, _ in ms:
            s = last[name]
            ratios = [a / b for a, b in zip(tps[name], tps["plain"])]
            rounds = s.get("spec_num_drafts", 0)
            rows.append({"method": name, "output_tok_per_s": statistics.median(tps[name]),
                         "tok_per_s_min": min(tps[name]), "tok_per_s_max": max(tps[name]),
                         "speedup": statistics.median(ratios), "speedup_min": min(ratios),
                         "speedup_max": max(ratios),
                         "tokens_per_pass": 1 + s["mean_accepted_tokens"] if rounds else 1.0,
                         "acceptance_rate": s.get("acceptance_rate") if rounds else None,
                         "lossy": name.endswith("typical")})
    return rows


def markdown(result):
    s = result["settings"]
    lines = ["# Chapter 06: typical acceptance (lossy) against the exact rule, sampling (CPU, Q4_1, one sequence)", ""]
    lines += provenance_lines(result["provenance"]) + [""]
    lines += [f'{s["n_prompts"]} free chat prompts, {s["max_tokens"]} tokens each (EOS ignored), temperature '
              f'{s["temperature"]}, seed {s["seed"]}, {s["repeats"]} interleaved repeats; median (min-max). Typical '
              f'acceptance: epsilon 0.09, alpha 0.3 (Medusa\'s defaults).', "",
              "| method | output tok/s | speedup over plain sampling | tokens / pass | acceptance | samples the target's distribution |",
              "|---|---:|---:|---:|---:|---|"]
    for r in result["rows"]:
        a = "" if r["acceptance_rate"] is None else f'{r["acceptance_rate"]:.3f}'
        lines.append(f'| {r["method"]} | {drafters.speed_cells(r)} | {r["tokens_per_pass"]:.2f} | '
                     f'{a} | {"no (lossy)" if r["lossy"] else "yes"} |')
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    drafters.add_run_args(ap, "06_speculative_typical_cpu")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    drafters.require_drafters(args, "typical.py")
    result = {"provenance": provenance(command="bench/06_speculative/typical.py " + " ".join(sys.argv[1:])),
              "settings": {"model": os.path.basename(drafters.MODEL), "repeats": args.repeats,
                           "max_tokens": args.max_tokens, "n_prompts": args.n_prompts,
                           "temperature": args.temperature, "seed": args.seed},
              "rows": measure(args)}
    write_results(args.out, result, markdown)
    print(markdown(result))


if __name__ == "__main__":
    main()
