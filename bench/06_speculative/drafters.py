#!/usr/bin/env python3
"""Chapter 06, section 7: the trained drafters - Medusa heads and the EAGLE drafter - against plain
decoding and n-gram lookup on the default Q4_1 file (issue 63), CPU, greedy, `lio batch`.

    .venv/bin/python bench/06_speculative/drafters.py [--repeats 5] [--max-tokens 48] [--quick]

Needs the heads scripts/make_medusa.sh trains and the drafter scripts/make_eagle.sh trains
(models/<model stem>.medusa.safetensors and .eagle.safetensors, not committed; a missing EAGLE
file drops its rows). Two prompt sets of 8 chat prompts each: "free" (the first 8 of
bench/06_speculative/prompts_eval_free.jsonl, held apart from the heads' training prompts) and
"grounded" (rewrite a given paragraph with one word changed: the answer copies its prompt). For
each set, each batch size (1 = --max-num-seqs 1, the 8 prompts one after another; 8 = all at
once; and the F32 copy at 1, where verification rides on the weight read) and each method
(plain; n-gram k = 4; Medusa as a chain of each head's argmax, 4 drafts; a Medusa tree of 8
nodes, top 4 per head; EAGLE as a chain of the drafter's argmax, 2 drafts; an EAGLE-2 tree of 3
nodes, top 2 per level, 2 levels: the best shapes of a one-repeat sweep on the free prompts), the runs are interleaved and repeated; the table gives the median
output tok/s with its min-max, the speedup over plain (median of the per-repeat ratios, a range
holding 1 is a tie), tokens per target pass (1 + accepted / rounds) and acceptance per depth
(the share of rounds whose draft at that depth was accepted), and whether every output equals
plain greedy decoding's byte for byte. EOS is ignored so every method makes the same tokens.
Writes bench/results/06_speculative_drafters_cpu.{json,md,png} and the drafter files' training
records (06_speculative_medusa_heads.{json,md}, 06_speculative_eagle_drafter.{json,md}; --heads-only
writes just those); the lesson renders its tables from the JSON. Nothing here is a test.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from liobench import ROOT
from liobench.results_meta import provenance, provenance_lines, write_results

LIO = os.path.join(ROOT, "build", "bin", "lio")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
F32 = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.F32.gguf")
FREE = os.path.join(ROOT, "bench", "06_speculative", "prompts_eval_free.jsonl")
PARAGRAPHS = [
    "The cat sat on the mat by the window. Every morning the cat watched the birds in the garden, and every "
    "evening the cat slept by the fire.",
    "Our team met on Monday to plan the release. The team agreed to test every feature twice, and the team "
    "lead wrote the schedule on the board.",
    "The river runs past the old mill and under the stone bridge. In spring the river floods the meadow, and "
    "in summer children swim in the river.",
    "My grandmother keeps a small garden behind the house. She grows tomatoes, beans and herbs, and every "
    "autumn she dries the herbs in the kitchen.",
]
SWAPS = [("cat", "dog"), ("team", "group"), ("river", "stream"), ("garden", "yard")]


def grounded_prompts():
    out = []
    for text, (a, b) in zip(PARAGRAPHS, SWAPS):
        out.append(f'Rewrite the following paragraph, replacing every "{a}" with "{b}" and changing nothing '
                   f'else:\n\n{text}')
        out.append(f"Copy the following text exactly, word for word:\n\n{text}")
    return out


def free_prompts(n):
    with open(FREE) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r["messages"][-1]["content"] if "messages" in r else r["prompt"] for r in rows[:n]]


def methods(heads, eagle):
    m = [("plain", []), ("ngram k=4", ["--spec-method", "ngram", "--num-speculative-tokens", "4"])]
    medusa = ["--spec-method", "medusa", "--medusa-heads", heads]
    m.append(("medusa chain", medusa + ["--medusa-top-k", "1", "--num-speculative-tokens", "4"]))
    m.append(("medusa tree 8", medusa + ["--medusa-top-k", "4", "--num-speculative-tokens", "8"]))
    if eagle:
        e = ["--spec-method", "eagle", "--eagle-drafter", eagle]
        m.append(("eagle chain 2", e + ["--eagle-top-k", "1", "--num-speculative-tokens", "2"]))
        m.append(("eagle tree 3", e + ["--eagle-top-k", "2", "--eagle-depth", "2", "--num-speculative-tokens", "3"]))
    return m


def add_run_args(ap, out_name):
    """The flags drafters.py, drafters_peer.py and typical.py share: repeats, tokens, prompts per
    set, the drafter files (default: beside the model) and the results prefix."""
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--n-prompts", type=int, default=8)
    ap.add_argument("--heads", default=os.path.splitext(MODEL)[0] + ".medusa.safetensors")
    ap.add_argument("--eagle", default=os.path.splitext(MODEL)[0] + ".eagle.safetensors")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", out_name))


def require_drafters(args, prog):
    """Exits naming the script that makes a missing drafter file."""
    for f, what in ((args.heads, "scripts/make_medusa.sh"), (args.eagle, "scripts/make_eagle.sh")):
        if not os.path.exists(f):
            sys.exit(f"{prog}: no {f}: run {what} first")


def write_chat_prompts(path, prompts):
    """One user turn per JSONL line, as `lio batch --prompts` reads them."""
    with open(path, "w") as f:
        for p in prompts:
            f.write(json.dumps({"messages": [{"role": "user", "content": p}]}) + "\n")


def run_batch(model, prompts_path, n_seqs, max_tokens, flags, tmp):
    out, summary = os.path.join(tmp, "out.jsonl"), os.path.join(tmp, "s.json")
    cmd = [LIO, "batch", "--model", model, "--prompts", prompts_path, "--out", out, "--summary", summary,
           "--max-tokens", str(max_tokens), "--ignore-eos", "--max-num-seqs", str(n_seqs)]
    if "--temperature" not in flags:  # greedy unless the caller samples (typical.py)
        cmd += ["--temperature", "0"]
    print("+ lio batch " + " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd[2:]),
          file=sys.stderr)
    subprocess.run(cmd + flags, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out) as f:
        texts = [r.get("text", "") for r in sorted((json.loads(line) for line in f if line.strip()),
                                                    key=lambda r: r["index"])]
    return json.load(open(summary)), texts


def verify_costs(model, repeats):
    """What a pass of 1 + k rows costs against one row on `model` (chapter 06's own measurement:
    ch06_speculative --json, costs.verify), at the activations lio batch runs (auto)."""
    cmd = [os.path.join(ROOT, "build", "bin", "ch06_speculative"), "--json", "--model", model, "--activations", "auto",
           "--methods", "ngram", "--k-max", "8", "--max-tokens", "8", "--layer-sweep", "6", "--repeats",
           str(repeats)]
    print("+ ch06_speculative " + " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd[1:]),
          file=sys.stderr)
    out = subprocess.run(cmd, check=True, text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout
    return json.loads(out)["costs"]["verify"]


def measure(args, heads, eagle):
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for set_name, prompts in (("free", free_prompts(args.n_prompts)), ("grounded", grounded_prompts())):
            path = os.path.join(tmp, f"{set_name}.jsonl")
            write_chat_prompts(path, prompts[:args.n_prompts])
            # The default Q4_1 file at every batch size; its F32 copy (the same drafters: they read
            # the hidden state, which the two files give nearly alike) at one sequence, where
            # verification rides on the weight read (section 7).
            for model, n_seqs in [(MODEL, n) for n in args.batch_sizes] + [(F32, 1)] * os.path.exists(F32):
                ms = methods(heads, eagle)
                tps = {name: [] for name, _ in ms}
                summaries, identical = {}, {name: True for name, _ in ms}
                plain_texts = None
                for _ in range(args.repeats):
                    for name, flags in ms:  # interleaved: plain, ngram, medusa ..., eagle ..., plain, ...
                        s, texts = run_batch(model, path, n_seqs, args.max_tokens, flags, tmp)
                        tps[name].append(s["output_tok_per_s"])
                        summaries[name] = s
                        if name == "plain":
                            plain_texts = texts
                        else:
                            identical[name] &= texts == plain_texts
                for name, _ in ms:
                    s = summaries[name]
                    ratios = [t / b for t, b in zip(tps[name], tps["plain"])]
                    rounds = s.get("spec_num_drafts", 0)
                    per_pos = [c / rounds for c in s.get("spec_accepted_per_position", [])] if rounds else []
                    rows.append({"prompts": set_name, "model": "F32" if model == F32 else "Q4_1",
                                 "max_num_seqs": n_seqs, "method": name,
                                 "output_tok_per_s": statistics.median(tps[name]),
                                 "tok_per_s_min": min(tps[name]), "tok_per_s_max": max(tps[name]),
                                 "speedup": statistics.median(ratios), "speedup_min": min(ratios),
                                 "speedup_max": max(ratios),
                                 "tokens_per_pass": 1 + s["mean_accepted_tokens"] if rounds else 1.0,
                                 "acceptance_per_depth": per_pos,
                                 "identical_to_plain": identical[name]})
    return rows


def heads_metadata(path):
    """A drafter file's own training record: the safetensors header's __metadata__ that
    scripts/train_medusa.py or scripts/train_eagle.py writes (held-out accuracies, data sizes)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        meta = json.loads(f.read(n)).get("__metadata__", {})
    out = {}
    for k, v in meta.items():
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


def heads_markdown(result):
    h = result["heads"]
    lines = ["# Chapter 06: the Medusa heads' training record", ""] + provenance_lines(result["provenance"]) + [""]
    lines += [f'Heads file trained by scripts/make_medusa.sh for {h["source_model"]}: {h["num_heads"]} heads, '
              f'draft vocabulary {h["draft_vocab_size"]} of {h["vocab_size"]} tokens, {h["train_sequences"]} '
              f'training answers ({h["train_positions"]} positions), {h["epochs"]} epochs; loss '
              f'{h["loss_initial"]} -> {h["loss_final"]}. Held-out accuracy per head (head k predicts the token '
              f'k + 2 ahead; a label outside the draft vocabulary counts as a miss; the LM head\'s own top-1 '
              f'there is {h["lm_head_top1"]}):', ""]
    lines += ["| head | predicts | top-1 | top-5 |", "|---:|---|---:|---:|"]
    for r in result["per_head"]:
        lines.append(f'| {r["head"]} | {r["predicts"]} | {r["top1"]:.3f} | {r["top5"]:.3f} |')
    return "\n".join(lines) + "\n"


def eagle_markdown(result):
    h = result["drafter"]
    lines = ["# Chapter 06: the EAGLE drafter's training record", ""] + provenance_lines(result["provenance"]) + [""]
    keys = ["source_model", "d_model", "n_heads", "n_kv_heads", "head_dim", "ffn", "draft_vocab_size", "vocab_size",
            "coverage", "epochs", "loss_initial", "loss_final", "top1", "top1_depth2", "top1_depth3", "train_seconds"]
    lines += [f"Drafter trained by scripts/make_eagle.sh (scripts/train_eagle.py's metadata). top1: the held-out "
              f"accuracy of the first draft token with the target's true features; top1_depth2 / 3: the drafter "
              f"fed its own predicted feature once / twice before.", "", "| field | value |", "|---|---|"]
    lines += [f"| {k} | {h[k]} |" for k in keys if k in h]
    return "\n".join(lines) + "\n"


def speed_cells(r):
    """A row's "output tok/s (min-max) | speedup (min-max)" Markdown cells (drafters_peer.py and
    typical.py print theirs the same way)."""
    return (f'{r["output_tok_per_s"]:.1f} ({r["tok_per_s_min"]:.1f}-{r["tok_per_s_max"]:.1f}) | {r["speedup"]:.2f}x '
            f'({r["speedup_min"]:.2f}-{r["speedup_max"]:.2f})')


def markdown(result):
    lines = ["# Chapter 06: Medusa heads and the EAGLE drafter on the CPU (greedy, default Q4_1 file)", ""]
    lines += provenance_lines(result["provenance"]) + [""]
    s = result["settings"]
    lines += [f'{s["n_prompts"]} prompts per set, {s["max_tokens"]} tokens each (EOS ignored), '
              f'{s["repeats"]} interleaved repeats; median (min-max). Heads: {s["heads"]}; EAGLE drafter: '
              f'{s.get("eagle") or "none"}.', ""]
    costs = result["verify_cost"]
    lines += ["A pass of n rows against one row (ch06_speculative's costs.verify, activations auto):", "",
              "| rows | " + " | ".join(costs) + " |", "|---:|" + "---:|" * len(costs)]
    for i, r in enumerate(costs["Q4_1"]):
        lines.append(f'| {r["rows"]} | ' + " | ".join(f'{c[i]["relative"]:.2f}x' for c in costs.values()) + " |")
    lines += [""]
    lines += ["| prompts | file | seqs | method | output tok/s | speedup over plain | tokens / pass | "
              "acceptance by depth | = plain |", "|---|---|---:|---|---:|---:|---:|---|---|"]
    for r in result["rows"]:
        depth = " ".join(f"{a:.2f}" for a in r["acceptance_per_depth"][:6])
        lines.append(f'| {r["prompts"]} | {r["model"]} | {r["max_num_seqs"]} | {r["method"]} | {speed_cells(r)} | '
                     f'{r["tokens_per_pass"]:.2f} | {depth} | '
                     f'{"yes" if r["identical_to_plain"] else "NO"} |')
    return "\n".join(lines) + "\n"


def plot(result, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, set_name in zip(axes, ("free", "grounded")):
        rows = [r for r in result["rows"] if r["prompts"] == set_name and r["method"] != "plain"]
        names = sorted({r["method"] for r in rows}, key=[r["method"] for r in rows].index)
        runs = sorted({(r["model"], r["max_num_seqs"]) for r in rows}, key=lambda x: (x[0] != "Q4_1", x[1]))
        width = 0.8 / max(1, len(runs))
        for j, (model, n) in enumerate(runs):
            ys = [next(r["speedup"] for r in rows if r["method"] == m and (r["model"], r["max_num_seqs"]) == (model, n))
                  for m in names]
            ax.bar([i + j * width for i in range(len(names))], ys, width, label=f"{model}, {n} seq")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([i + width * (len(runs) - 1) / 2 for i in range(len(names))], names, rotation=20)
        ax.set_title(f"{set_name} prompts")
    axes[0].set_ylabel("output tok/s over plain")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_run_args(ap, "06_speculative_drafters_cpu")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--quick", action="store_true", help="one repeat, 2 prompts, 24 tokens (a smoke run)")
    ap.add_argument("--heads-only", action="store_true",
                    help="write only the drafters' training records (06_speculative_medusa_heads, _eagle_drafter)")
    args = ap.parse_args()
    if args.quick:
        args.repeats, args.n_prompts, args.max_tokens = 1, 2, 24
    if not os.path.exists(args.heads):
        sys.exit(f"no Medusa heads at {args.heads}: run scripts/make_medusa.sh first")
    meta = heads_metadata(args.heads)
    card = {"provenance": provenance(command="bench/06_speculative/drafters.py " + " ".join(sys.argv[1:])),
            "heads": meta,
            "per_head": [{"head": k, "predicts": f"t + {k + 2}", "top1": t1, "top5": t5}
                         for k, (t1, t5) in enumerate(zip(meta.get("top1", []), meta.get("top5", [])))]}
    eagle = args.eagle if os.path.exists(args.eagle) else None
    if eagle is None:
        print(f"no EAGLE drafter at {args.eagle} (scripts/make_eagle.sh): its rows are left out", file=sys.stderr)
    if not args.quick:
        write_results(os.path.join(os.path.dirname(args.out), "06_speculative_medusa_heads"), card, heads_markdown)
        if eagle:
            ecard = {"provenance": card["provenance"], "drafter": heads_metadata(eagle)}
            write_results(os.path.join(os.path.dirname(args.out), "06_speculative_eagle_drafter"), ecard,
                          eagle_markdown)
    if args.heads_only:
        return
    result = {"provenance": provenance(command="bench/06_speculative/drafters.py " + " ".join(sys.argv[1:])),
              "settings": {"model": os.path.basename(MODEL), "heads": os.path.basename(args.heads),
                           "eagle": os.path.basename(eagle) if eagle else None, "repeats": args.repeats,
                           "max_tokens": args.max_tokens, "n_prompts": args.n_prompts,
                           "batch_sizes": args.batch_sizes},
              "verify_cost": {"Q4_1": verify_costs(MODEL, args.repeats)},
              "rows": measure(args, args.heads, eagle)}
    if os.path.exists(F32):
        result["verify_cost"]["F32"] = verify_costs(F32, args.repeats)
    written = write_results(args.out, result, markdown)
    plot(written, args.out + ".png")
    print(markdown(written))


if __name__ == "__main__":
    main()
