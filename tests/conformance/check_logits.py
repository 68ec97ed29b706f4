#!/usr/bin/env python3
"""Conformance of LIO's forward pass against llama.cpp (the oracle; via llama-cpp-python).

(b) Teacher-forced logits on fixed English texts of 64+ tokens: top-1 agreement per
    position and KL(llama.cpp || LIO), both reported; fails below --min-top1 or above
    --max-mean-kl.
(c) Greedy 32-token continuations of 3 prompts: equal, or the first divergence is a
    near-tie in llama.cpp's logits (top-2 margin printed; fails above --max-tie-margin).

Same token ids go to both engines (llama.cpp's own tokenization), so only the forward
pass is compared here; tokenization has its own test (check_tokenizer.py).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

TEXTS = [
    "The history of computing is a story of abstraction. Early machines were programmed by "
    "rewiring panels of cables, and every new problem meant a new physical arrangement. Stored-"
    "program computers changed that: instructions became data, kept in the same memory as the "
    "numbers they operated on, and a single machine could run any program that fit.",
    "To bake a simple loaf of bread, mix flour, water, salt and a little yeast until the dough "
    "comes together. Knead it for about ten minutes, until it is smooth and springs back when "
    "pressed. Let it rise in a warm place for an hour, shape it, let it rise again, and bake it "
    "in a hot oven until the crust is deep brown and the loaf sounds hollow when tapped.",
    "Large language models generate text one token at a time. For each new token the model "
    "attends to every token before it, so without a cache the work per step grows with the "
    "length of the sequence. Storing the keys and values of earlier tokens turns that quadratic "
    "cost into a linear one, at the price of memory that grows with batch size and context.",
]

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n",
]


def lio_logits(lio, model, ids, threads):
    with tempfile.NamedTemporaryFile(suffix=".f32", delete=False) as f:
        out = f.name
    try:
        cmd = [lio, "logits", "--model", model, "--ids", ",".join(map(str, ids)), "--out", out]
        if threads:
            cmd += ["--threads", str(threads)]
        subprocess.run(cmd, check=True, stdout=subprocess.PIPE)
        return np.fromfile(out, dtype=np.float32).reshape(len(ids), -1)
    finally:
        os.unlink(out)


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lio", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--min-top1", type=float, default=0.98)
    ap.add_argument("--max-mean-kl", type=float, default=0.02)
    ap.add_argument("--max-tie-margin", type=float, default=0.5)
    ap.add_argument("--json-out", help="write the measured figures here")
    args = ap.parse_args()

    from llama_cpp import Llama

    llm = Llama(model_path=args.model, n_ctx=512, logits_all=True, verbose=False,
                n_threads=args.threads or None, seed=0)
    failures = []
    report = {"texts": [], "greedy": []}

    # ---- (b) teacher-forced logits --------------------------------------------------------
    all_top1, all_kl = [], []
    for i, text in enumerate(TEXTS):
        ids = llm.tokenize(text.encode(), add_bos=False, special=False)
        assert len(ids) >= 64, f"text {i} has only {len(ids)} tokens"
        llm.reset()
        llm.eval(ids)
        ref = np.array(llm.scores[: len(ids)], dtype=np.float32)
        ours = lio_logits(args.lio, args.model, ids, args.threads)
        assert ours.shape == ref.shape, (ours.shape, ref.shape)
        top1 = (ref.argmax(-1) == ours.argmax(-1)).mean()
        lp, lq = log_softmax(ref), log_softmax(ours)
        kl = (np.exp(lp) * (lp - lq)).sum(-1)
        all_top1.append(top1)
        all_kl.extend(kl.tolist())
        rel = np.abs(ours - ref).max() / np.abs(ref).max()
        print(f"text {i}: {len(ids)} tokens  top-1 agreement {top1:.4f}  "
              f"KL mean {kl.mean():.5f} max {kl.max():.5f}  max |dlogit|/max|logit| {rel:.4f}")
        report["texts"].append({"n_tokens": len(ids), "top1": float(top1), "kl_mean": float(kl.mean()),
                                "kl_max": float(kl.max())})
    top1_all = float(np.mean(all_top1))
    kl_mean = float(np.mean(all_kl))
    print(f"overall: top-1 agreement {top1_all:.4f} (need >= {args.min_top1}), "
          f"mean KL(llama.cpp || lio) {kl_mean:.5f} (need <= {args.max_mean_kl})")
    report.update(top1=top1_all, kl_mean=kl_mean)
    if top1_all < args.min_top1:
        failures.append(f"top-1 agreement {top1_all:.4f} < {args.min_top1}")
    if kl_mean > args.max_mean_kl:
        failures.append(f"mean KL {kl_mean:.5f} > {args.max_mean_kl}")

    # ---- (c) greedy continuations ---------------------------------------------------------
    for prompt in PROMPTS:
        ids = llm.tokenize(prompt.encode(), add_bos=False, special=False)
        llm.reset()
        llm.eval(ids)
        ref_tokens = []
        for _ in range(32):
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            if tok == llm.token_eos():
                break
            ref_tokens.append(tok)
            llm.eval([tok])
        out = subprocess.run([args.lio, "generate", "--model", args.model, "--prompt", prompt,
                              "--temperature", "0", "--max-tokens", "32", "--json"]
                             + (["--threads", str(args.threads)] if args.threads else []),
                             check=True, stdout=subprocess.PIPE, text=True).stdout
        ours = json.loads(out)["token_ids"]
        entry = {"prompt": prompt, "equal": ours == ref_tokens}
        if ours == ref_tokens:
            print(f"greedy {prompt!r}: {len(ours)} tokens identical")
        else:
            k = next((j for j in range(min(len(ours), len(ref_tokens))) if ours[j] != ref_tokens[j]),
                     min(len(ours), len(ref_tokens)))
            # Margin in llama.cpp's logits at the divergence: its pick vs ours.
            llm.reset()
            llm.eval(ids + ref_tokens[:k])
            row = np.array(llm.scores[llm.n_tokens - 1])
            mine = lio_logits(args.lio, args.model, ids + ref_tokens[:k], args.threads)[-1]
            if k < len(ours) and k < len(ref_tokens):
                margin_ref = float(row[ref_tokens[k]] - row[ours[k]])
                margin_ours = float(mine[ours[k]] - mine[ref_tokens[k]])
            else:  # one side stopped (EOS) earlier
                margin_ref = margin_ours = float("nan")
            print(f"greedy {prompt!r}: diverges at token {k}: llama.cpp {ref_tokens[k:k+1]} vs lio "
                  f"{ours[k:k+1]}; llama.cpp margin {margin_ref:.4f}, lio margin {margin_ours:.4f}")
            entry.update(diverge_at=k, margin_llama=margin_ref, margin_lio=margin_ours)
            if not (margin_ref <= args.max_tie_margin):
                failures.append(f"greedy {prompt!r} diverges at {k} without a near-tie "
                                f"(margin {margin_ref:.4f})")
        report["greedy"].append(entry)

    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=2)
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    print("logits conformance: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
