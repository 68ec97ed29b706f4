#!/usr/bin/env python3
"""`lio batch` against `lio generate`, one request at a time, on a real model (issue 41: Gemma 3
with its sliding-window layers, and SmolLM2): greedy continuations of prompts of different
lengths, one of them longer than Gemma's 512-token window, batched through one engine (continuous
batching, chunked prefill: --max-num-batched-tokens 256) must give the same token ids as each
prompt generated alone. A row's attention depends only on its own sequence (batch invariance),
so any difference is a bug, not noise: exit 1 on the first.
  check_batch_equals_single.py --lio build/bin/lio --model models/gemma-3-270m-q4_k_m.gguf
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n",
    " ".join(["The history of computing is a story of abstraction, and every layer hides the one below it."] * 40),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lio", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--max-tokens", type=int, default=24)
    a = ap.parse_args()
    common = ["--model", a.model, "--temperature", "0", "--max-tokens", str(a.max_tokens), "--ignore-eos"]
    with tempfile.TemporaryDirectory() as d:
        prompts, out = os.path.join(d, "p.jsonl"), os.path.join(d, "o.jsonl")
        with open(prompts, "w") as f:
            for p in PROMPTS:
                f.write(json.dumps({"prompt": p}) + "\n")
        subprocess.run([a.lio, "batch", "--prompts", prompts, "--out", out, "--max-num-seqs", "4",
                        "--max-num-batched-tokens", "256"] + common, check=True, stdout=subprocess.DEVNULL)
        batched = [json.loads(line) for line in open(out) if line.strip()]
    failures = 0
    for i, p in enumerate(PROMPTS):
        single = json.loads(subprocess.run([a.lio, "generate", "--prompt", p, "--json"] + common, check=True,
                                           stdout=subprocess.PIPE, text=True).stdout)
        got = next(r for r in batched if r.get("index") == i)
        same = got["token_ids"] == single["token_ids"]
        shown = p if len(p) < 50 else p[:40] + f"... ({len(p)} chars)"
        print(f"{'ok  ' if same else 'FAIL'} {shown!r}: batch {len(got['token_ids'])} tokens, alone "
              f"{len(single['token_ids'])}{'' if same else ': ' + str(got['token_ids']) + ' vs ' + str(single['token_ids'])}")
        failures += not same
    print("PASS" if failures == 0 else f"FAIL: {failures} of {len(PROMPTS)} differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
