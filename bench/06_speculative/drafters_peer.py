#!/usr/bin/env python3
"""Chapter 06, section 7's peer row (issue 63, item 6): LIO's drafters against llama.cpp's best
speculative setting on the same machine, file and chat prompts - the default Q4_1 file, one
sequence, greedy, EOS ignored.

    .venv/bin/python bench/06_speculative/drafters_peer.py [--repeats 5]

llama.cpp serves no trained drafter (no Medusa or EAGLE in the pinned llama-cpp-python's
llama.cpp), and SmolLM2-135M is the smallest model of its vocabulary, so no draft model exists for
it: its speculative tools for this file are `llama-lookup` (n-gram lookup over the context,
--draft-max k) and `llama-lookahead` (lookahead decoding, Fu et al. 2024; W = 15, N = 5, G = 15
fixed in its source, so it runs 31 sequences in one KV cache: -np 31 -kvu). First a sweep runs
each setting once per prompt set (plain, lookup at k = 2, 4, 8, lookahead; recorded as
llama_sweep); the repeats then run llama.cpp's plain decoding and the lookup k that made the most
tok/s in the sweep (lookahead, a hundred-odd rows a step, is far slower than plain on 2 cores and
runs in the sweep only). llama.cpp's own plain decoding is `llama-lookup --draft-max 0` (one token
per pass, timed the same way), so both engines' speedups are over their own plain decoding
measured the same way.

Prompts: drafters.py's two sets of 8 chat prompts ("free": held-out chat questions; "grounded":
rewrite or copy a given paragraph), rendered by the GGUF file's own chat template with Jinja2
for llama.cpp, which parses the special tokens; LIO's `lio batch` renders the same turns itself
(the prompt token counts are checked equal). LIO's rows are `lio batch --max-num-seqs 1` over the
8 prompts (plain, n-gram k = 4, Medusa's tree of 8, EAGLE's chain of 2: drafters.py's best
shapes); llama.cpp's rows are one process per prompt, its tok/s the generated tokens over the
summed prompt and decode times it reports (lio batch's wall time holds its prefills too). All
runs of a repeat are interleaved; 5 repeats; median (min-max) of tok/s and of the per-repeat
ratio to the engine's own plain run; a ratio whose range holds 1 is a tie. "= own plain": every
output equals that engine's plain greedy text (llama.cpp's tools may run a round past -n: the
shorter text must begin the longer). Writes
bench/results/06_speculative_drafters_peer_cpu.{json,md}. Needs the peers built by
bench/batched/build_llama_tools.sh --speculative and the drafter files (scripts/make_medusa.sh,
scripts/make_eagle.sh). Nothing here is a test.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

import drafters
from liobench import ROOT
from liobench.results_meta import provenance, provenance_lines, write_results

LLAMA = os.path.join(os.environ.get("LLAMA_BUILD_DIR", os.path.join(ROOT, "build-llama")), "bin")


def chat_texts(prompts):
    """Each prompt as one user turn through the GGUF file's chat template (Jinja2, the
    template's reference engine), with the assistant's turn opened."""
    import gguf
    import jinja2
    reader = gguf.GGUFReader(drafters.MODEL)
    field = reader.fields["tokenizer.chat_template"]
    template = jinja2.Environment().from_string(bytes(field.parts[field.data[0]]).decode("utf-8"))
    return [template.render(messages=[{"role": "user", "content": p}], add_generation_prompt=True) for p in prompts]


def llama_run(tool, text, max_tokens, extra):
    """One llama.cpp speculative tool on one prompt: (generated tokens, seconds of prompt and
    decode, drafted, accepted, the generated text)."""
    cmd = [os.path.join(LLAMA, tool), "-m", drafters.MODEL, "-p", text, "-n", str(max_tokens), "--ignore-eos",
           "--temp", "0", "-c", "2048", "-s", "1"] + extra
    r = subprocess.run(cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    log = r.stdout + r.stderr
    if r.returncode != 0:
        sys.exit(f"drafters_peer.py: {tool} failed ({r.returncode}):\n{log[-2000:]}")
    enc = re.search(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds", log)
    dec = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", log)
    drafted = re.search(r"n_drafted\s*=\s*(\d+)", log)
    accepted = re.search(r"n_accept\s*=\s*(\d+)", log)
    if not (enc and dec):
        sys.exit(f"drafters_peer.py: cannot read {tool}'s timings:\n{log[-2000:]}")
    return {"n_prompt": int(enc.group(1)), "n_tokens": int(dec.group(1)),
            "seconds": float(enc.group(2)) + float(dec.group(2)),
            "drafted": int(drafted.group(1)) if drafted else 0, "accepted": int(accepted.group(1)) if accepted else 0,
            # llama-lookup prints each draft's candidates among the text it generates
            "text": re.sub(r" - draft candidate: token=\d+\n", "", r.stdout).rstrip("\n")}


def llama_set(tool, texts, max_tokens, extra):
    runs = [llama_run(tool, t, max_tokens, extra) for t in texts]
    tokens, secs = sum(r["n_tokens"] for r in runs), sum(r["seconds"] for r in runs)
    drafted, accepted = sum(r["drafted"] for r in runs), sum(r["accepted"] for r in runs)
    return {"tok_per_s": tokens / secs, "acceptance": accepted / drafted if drafted else None,
            "texts": [r["text"] for r in runs], "n_prompt": [r["n_prompt"] for r in runs]}


LOOKAHEAD = ("lookahead", "llama-lookahead", ["-np", "31", "-kvu"])  # W + G + 1 = 31 sequences in one KV cache


def llama_methods(k):
    return [("plain", "llama-lookup", ["--draft-max", "0", "--draft-min", "0"]),
            (f"lookup k={k}", "llama-lookup", ["--draft-max", str(k), "--draft-min", "0"])]


def lio_methods(heads, eagle):
    keep = {"plain", "ngram k=4", "medusa tree 8", "eagle chain 2"}
    return [(n, f) for n, f in drafters.methods(heads, eagle) if n in keep]


def sweep(args, sets):
    """One run of each llama.cpp setting per prompt set: plain, lookup at k = 2, 4, 8, lookahead.
    Returns the rows and, per set, the lookup k with the most tok/s (the one the repeats run)."""
    rows, best_k = [], {}
    for set_name, prompts in sets:
        texts = chat_texts(prompts)
        settings = [("plain", "llama-lookup", ["--draft-max", "0", "--draft-min", "0"])]
        settings += [(f"lookup k={k}", "llama-lookup", ["--draft-max", str(k), "--draft-min", "0"]) for k in (2, 4, 8)]
        settings.append(LOOKAHEAD)
        for name, tool, extra in settings:
            r = llama_set(tool, texts, args.max_tokens, extra)
            rows.append({"prompts": set_name, "method": name, "output_tok_per_s": r["tok_per_s"],
                         "acceptance_rate": r["acceptance"]})
            print(f"  sweep {set_name}: llama.cpp {name} {r['tok_per_s']:.1f} tok/s", file=sys.stderr)
        lookups = [r for r in rows if r["prompts"] == set_name and r["method"].startswith("lookup")]
        best_k[set_name] = int(max(lookups, key=lambda r: r["output_tok_per_s"])["method"].split("=")[1])
    return rows, best_k


def measure(args, sets, heads, eagle, best_k):
    rows, checks = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for set_name, prompts in sets:
            path = os.path.join(tmp, f"{set_name}.jsonl")
            drafters.write_chat_prompts(path, prompts)
            texts = chat_texts(prompts)
            configs = [("lio", n, f) for n, f in lio_methods(heads, eagle)]
            configs += [("llama.cpp", n, (tool, extra)) for n, tool, extra in llama_methods(best_k[set_name])]
            tps = {(e, n): [] for e, n, _ in configs}
            acc, same = {}, {(e, n): True for e, n, _ in configs}
            plain_out = {}
            for rep in range(args.repeats):
                for engine, name, how in configs:  # interleaved: LIO's methods, then llama.cpp's, every repeat
                    if engine == "lio":
                        s, outs = drafters.run_batch(drafters.MODEL, path, 1, args.max_tokens, how, tmp)
                        tps[(engine, name)].append(s["output_tok_per_s"])
                        acc[(engine, name)] = s.get("acceptance_rate") if name != "plain" else None
                        if rep == 0 and name == "plain":
                            checks.append({"prompts": set_name, "lio_prompt_tokens": s["prompt_tokens"]})
                    else:
                        r = llama_set(how[0], texts, args.max_tokens, how[1])
                        tps[(engine, name)].append(r["tok_per_s"])
                        acc[(engine, name)] = r["acceptance"]
                        outs = r["texts"]
                        if rep == 0 and name == "plain":
                            checks[-1]["llama_prompt_tokens"] = sum(r["n_prompt"])
                    if name == "plain":
                        plain_out[engine] = outs
                    else:  # llama.cpp's tools may overshoot -n by a round's drafts: the shorter is a prefix
                        same[(engine, name)] &= all(a.startswith(b) or b.startswith(a)
                                                    for a, b in zip(outs, plain_out[engine]))
                    print(f"  {set_name} rep {rep + 1}: {engine} {name} {tps[(engine, name)][-1]:.1f} tok/s",
                          file=sys.stderr)
            for engine, name, _ in configs:
                t, base = tps[(engine, name)], tps[(engine, "plain")]
                ratios = [a / b for a, b in zip(t, base)]
                rows.append({"prompts": set_name, "engine": engine, "method": name,
                             "output_tok_per_s": statistics.median(t), "tok_per_s_min": min(t),
                             "tok_per_s_max": max(t), "speedup": statistics.median(ratios),
                             "speedup_min": min(ratios), "speedup_max": max(ratios),
                             "acceptance_rate": acc[(engine, name)], "identical_to_own_plain": same[(engine, name)],
                             "runs_tok_per_s": t})
    for c in checks:
        if c.get("llama_prompt_tokens") != c["lio_prompt_tokens"]:
            sys.exit(f"drafters_peer.py: the engines saw different prompts ({c}): the rendering differs")
    return rows, checks


def best_ratios(rows):
    """LIO's best method over llama.cpp's best, repeat by repeat (each engine's best by median tok/s)."""
    out = []
    for set_name in sorted({r["prompts"] for r in rows}, key=["free", "grounded"].index):
        best = {}
        for engine in ("lio", "llama.cpp"):
            cands = [r for r in rows if r["prompts"] == set_name and r["engine"] == engine]
            best[engine] = max(cands, key=lambda r: r["output_tok_per_s"])
        per = [a / b for a, b in zip(best["lio"]["runs_tok_per_s"], best["llama.cpp"]["runs_tok_per_s"])]
        out.append({"prompts": set_name, "lio_best": best["lio"]["method"], "llama_best": best["llama.cpp"]["method"],
                    "ratio": statistics.median(per), "min": min(per), "max": max(per),
                    "tie": min(per) <= 1.0 <= max(per)})
    return out


def markdown(result):
    s = result["settings"]
    lines = ["# Chapter 06: trained drafters against llama.cpp's speculative tools (CPU, Q4_1, one sequence, greedy)",
             ""] + provenance_lines(result["provenance"]) + [""]
    lines += [f'{s["n_prompts"]} chat prompts per set, {s["max_tokens"]} tokens each (EOS ignored), '
              f'{s["repeats"]} interleaved repeats; median (min-max). Speedup: over the same engine\'s plain decoding '
              f'in the same repeat. llama.cpp plain = llama-lookup --draft-max 0.', "",
              "| prompts | engine | method | output tok/s | speedup over own plain | acceptance | = own plain |",
              "|---|---|---|---:|---:|---:|---|"]
    for r in result["rows"]:
        a = "" if r["acceptance_rate"] is None else f'{r["acceptance_rate"]:.3f}'
        lines.append(f'| {r["prompts"]} | {r["engine"]} | {r["method"]} | {drafters.speed_cells(r)} | {a} | '
                     f'{"yes" if r["identical_to_own_plain"] else "NO"} |')
    lines += ["", "llama.cpp's settings, one run each (the repeats run plain and the lookup k with the most tok/s):", "",
              "| prompts | method | output tok/s | acceptance |", "|---|---|---:|---:|"]
    for r in result["llama_sweep"]:
        a = "" if r["acceptance_rate"] is None else f'{r["acceptance_rate"]:.3f}'
        lines.append(f'| {r["prompts"]} | {r["method"]} | {r["output_tok_per_s"]:.1f} | {a} |')
    lines += ["", "Each engine at its best (by median tok/s), repeat by repeat:", "",
              "| prompts | LIO's best | llama.cpp's best | LIO / llama.cpp | min-max | tie |", "|---|---|---|---:|---:|---|"]
    for r in result["best"]:
        lines.append(f'| {r["prompts"]} | {r["lio_best"]} | {r["llama_best"]} | {r["ratio"]:.2f}x | '
                     f'{r["min"]:.2f}-{r["max"]:.2f} | {"tie" if r["tie"] else ""} |')
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    drafters.add_run_args(ap, "06_speculative_drafters_peer_cpu")
    args = ap.parse_args()
    subprocess.run(["bash", os.path.join(ROOT, "bench", "batched", "build_llama_tools.sh"), "--speculative"], check=True)
    drafters.require_drafters(args, "drafters_peer.py")
    sets = [("free", drafters.free_prompts(args.n_prompts)), ("grounded", drafters.grounded_prompts()[:args.n_prompts])]
    sweep_rows, best_k = sweep(args, sets)
    rows, checks = measure(args, sets, args.heads, args.eagle, best_k)
    result = {"provenance": provenance(command="bench/06_speculative/drafters_peer.py " + " ".join(sys.argv[1:])),
              "settings": {"model": os.path.basename(drafters.MODEL), "repeats": args.repeats,
                           "max_tokens": args.max_tokens, "n_prompts": args.n_prompts, "llama_lookup_k": best_k},
              "llama_sweep": sweep_rows, "prompt_checks": checks, "rows": rows, "best": best_ratios(rows)}
    write_results(args.out, result, markdown)
    print(markdown(result))


if __name__ == "__main__":
    main()
