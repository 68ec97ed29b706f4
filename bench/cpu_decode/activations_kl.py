#!/usr/bin/env python3
"""Int8 vs f32 activations on the quantized model: how far each is from the F32 model, next to
llama.cpp's own distance between the same two files (issue 31's rule for the default).

llama.cpp multiplies Q4_1 weights by activations rounded to 8 bits per 32-element block (ggml's
Q8_1 vec_dot_type), so "llama.cpp Q4_1 vs llama.cpp F32" is the accuracy the field ships with
these files. LIO runs the same Q4_1 file with --activations f32 (dequantized weights times f32
x) and --activations int8 (the same per-block rounding of x as ggml's, integer block dot
products). Each is compared with the F32 copy made by llama.cpp's quantize API (the Q4_1
weights dequantized: so every difference below is the activations' rounding, nothing else),
teacher-forced on the conformance texts (tests/conformance/check_logits.py) and --windows
windows of 256 tokens of /usr/share/common-licenses/GPL-3 (Debian's, as chapter 03's perplexity
check uses), by mean KL(F32 || q) over every position and top-1 agreement:
  - llama.cpp Q4_1 vs llama.cpp F32     (the field's level)
  - LIO Q4_1 f32 act vs llama.cpp F32
  - LIO Q4_1 int8 act vs llama.cpp F32
  - LIO F32 vs llama.cpp F32            (how close the two engines are where they do the same math)
Issue 31's rule: int8 may become the CPU default only if its KL is at llama.cpp's own level
(ratio <= 1.10: a tenth for the texts' spread). The script also prints the greedy answers to the
course's first example (the README's chat question) from each engine and setting: the reason
the default stays f32 is there.

Writes bench/results/cpu_activations_kl.{json,md} with command, commit, machine and date.
  .venv/bin/python bench/cpu_decode/activations_kl.py
"""
import argparse
import json
import os

import numpy as np

from liobench import ROOT, flags, repo_module
from liobench.results_meta import provenance, provenance_lines


_check_logits = repo_module("tests/conformance/check_logits.py")
TEXTS, compare, lio_logits, teacher_forced = (_check_logits.TEXTS, _check_logits.compare, _check_logits.lio_logits,
                                              _check_logits.teacher_forced)

RULE_RATIO = 1.10
CHAT_QUESTION = "What is the capital of France?"  # README.md's first example
GREEDY_TOKENS = 24


def greedy_answers(args, f32_llm, q_llm):
    """{engine and setting: greedy chat answer} for CHAT_QUESTION."""
    import subprocess

    answers = {}
    for name, llm in (("llama.cpp F32", f32_llm), ("llama.cpp Q4_1", q_llm)):
        llm.reset()
        r = llm.create_chat_completion(messages=[{"role": "user", "content": CHAT_QUESTION}], temperature=0,
                                       max_tokens=GREEDY_TOKENS)
        answers[name] = r["choices"][0]["message"]["content"]
    for act in ("f32", "int8"):
        out = subprocess.run([args.lio, "generate", "--model", args.model, "--chat", "--prompt", CHAT_QUESTION,
                              "--max-tokens", str(GREEDY_TOKENS), "--temperature", "0", "--activations", act,
                              "--json", "--threads", str(args.threads)],
                             check=True, stdout=subprocess.PIPE, text=True).stdout
        answers[f"LIO Q4_1, --activations {act}"] = json.loads(out)["text"]
    return answers


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    flags.add_lio(ap)
    flags.add_model(ap)
    ap.add_argument("--f32-model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.F32.gguf"))
    flags.add_threads(ap, 2)
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--windows", type=int, default=8, help="256-token windows of --text")
    flags.add_out(ap, "cpu_activations_kl")
    args = ap.parse_args()
    from llama_cpp import Llama

    def llama(model):
        return Llama(model_path=model, n_ctx=512, logits_all=True, verbose=False, n_threads=args.threads, seed=0)

    ref_llm, q_llm = llama(args.f32_model), llama(args.model)
    rows = {"llama.cpp Q4_1": [], "LIO Q4_1, --activations f32": [], "LIO Q4_1, --activations int8": [],
            "LIO F32": []}
    top1 = {k: [] for k in rows}
    per_seq = {k: [] for k in rows}  # each sequence's mean KL, for the ratio's spread
    n_tokens = 0
    sequences = [ref_llm.tokenize(text.encode(), add_bos=False, special=False) for text in TEXTS]
    with open(args.text, encoding="utf-8") as f:
        corpus = ref_llm.tokenize(f.read().encode(), add_bos=False, special=False)
    step = max(256, (len(corpus) - 256) // max(1, args.windows))
    sequences += [corpus[i * step:i * step + 256] for i in range(args.windows) if i * step + 256 <= len(corpus)]
    for ids in sequences:
        n_tokens += len(ids)
        ref = teacher_forced(ref_llm, ids)
        candidates = {
            "llama.cpp Q4_1": teacher_forced(q_llm, ids),
            "LIO Q4_1, --activations f32": lio_logits(args.lio, args.model, ids, args.threads, activations="f32"),
            "LIO Q4_1, --activations int8": lio_logits(args.lio, args.model, ids, args.threads, activations="int8"),
            "LIO F32": lio_logits(args.lio, args.f32_model, ids, args.threads),
        }
        for name, logits in candidates.items():
            t, kl = compare(ref, logits)
            rows[name].extend(kl.tolist())
            per_seq[name].append((float(kl.sum()), len(ids)))
            top1[name] += [t] * len(ids)
    summary = {name: {"kl_mean": float(np.mean(v)), "kl_p99": float(np.percentile(v, 99)),
                      "top1": float(np.mean(top1[name]))} for name, v in rows.items()}
    field = summary["llama.cpp Q4_1"]["kl_mean"]
    int8 = summary["LIO Q4_1, --activations int8"]["kl_mean"]
    ratio = int8 / field
    # The ratio's spread: 2,000 bootstrap resamples of the sequences (fixed seed), 5th-95th percentile.
    rng = np.random.default_rng(0)
    a, b = np.array(per_seq["LIO Q4_1, --activations int8"]), np.array(per_seq["llama.cpp Q4_1"])
    boot = []
    for _ in range(2000):
        pick = rng.integers(0, len(a), len(a))
        boot.append((a[pick, 0].sum() / a[pick, 1].sum()) / (b[pick, 0].sum() / b[pick, 1].sum()))
    lo, hi = (float(v) for v in np.percentile(boot, [5, 95]))
    verdict = ("int8 is at llama.cpp's level" if ratio <= RULE_RATIO or lo <= 1.0 else "int8 is below llama.cpp's level")
    greedy = greedy_answers(args, ref_llm, q_llm)
    meta = provenance()
    result = {"provenance": meta, "n_sequences": len(sequences), "n_tokens": n_tokens, "reference": "llama.cpp on the F32 copy",
              "rows": summary, "int8_over_llama_kl": ratio, "int8_over_llama_kl_p5_p95": [lo, hi], "rule_ratio": RULE_RATIO, "verdict": verdict,
              "greedy": greedy}
    with open(args.out + ".json", "w") as f:
        json.dump(result, f, indent=2)
    lines = ["# Int8 vs f32 activations on the Q4_1 model: distance from the F32 model", ""]
    lines += provenance_lines(meta)
    lines += [f"- Texts: the {len(TEXTS)} conformance texts of tests/conformance/check_logits.py and "
              f"{len(sequences) - len(TEXTS)} windows of 256 tokens of {os.path.basename(args.text)}: {n_tokens} "
              "positions, teacher-forced; reference: llama.cpp's logits on the F32 copy (the Q4_1 weights "
              "dequantized, so each row's distance is its activations' rounding alone)", "",
              "| engine and setting | mean KL(F32 ‖ q) | p99 KL | top-1 agreement |", "|---|---:|---:|---:|"]
    for name, r in summary.items():
        lines.append(f"| {name} | {r['kl_mean']:.6f} | {r['kl_p99']:.6f} | {r['top1']:.4f} |")
    lines += ["", f"LIO int8 / llama.cpp KL = {ratio:.3f} (5th-95th percentile over 2,000 bootstrap resamples of the "
              f"sequences: {lo:.3f}-{hi:.3f}; rule: <= {RULE_RATIO:.2f}, or a spread that holds 1): **{verdict}**.", "",
              f"Greedy answers ({GREEDY_TOKENS} tokens, temperature 0) to the course's first example, the chat "
              f"question {CHAT_QUESTION!r}:", "", "| engine and setting | answer |", "|---|---|"]
    for name, text in greedy.items():
        lines.append(f"| {name} | {text!r} |")
    lines.append("")
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
