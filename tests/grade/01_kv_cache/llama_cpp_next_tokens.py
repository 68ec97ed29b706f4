#!/usr/bin/env python3
"""llama.cpp's next-token choices on the default model, the oracle of chapter 01's Task 5.

Writes tests/grade/01_kv_cache/llama_cpp_next_tokens.json: for each text, llama.cpp's own token
ids and, at every position, its five most likely next tokens (teacher-forced); for each prompt,
its greedy continuation with the top-2 ids and logits at every step. The grading test
(test_task_5_decoder_layer.cpp) runs the same ids through LIO with the learner's decoder layer.
Token ids only: no weights are stored. With --check FILE it recomputes and compares with FILE
instead (the conformance test conformance_ch01_layer_oracle): the texts' ids equal, top-1 equal at
>= 98% of positions (two builds of llama.cpp may split a near-tie differently), greedy paths equal
up to a near-tie.

Run (in the venv scripts/setup.sh makes; llama-cpp-python as pinned there):
  .venv/bin/python tests/grade/01_kv_cache/llama_cpp_next_tokens.py \
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf --out tests/grade/01_kv_cache/llama_cpp_next_tokens.json
"""
import argparse
import hashlib
import json
import sys

import numpy as np

TEXTS = [
    "A decoder layer reads the residual stream, normalizes it, and projects it into queries, keys and "
    "values. The keys and values of every earlier token wait in the cache, so a new token only adds "
    "its own row before attending to all of them.",
    "The river was quiet that morning. An old fisherman pushed his boat into the water, checked his "
    "nets twice, and rowed out toward the island where the birds gathered at dawn.",
    "To make tea, boil fresh water, warm the pot, add one spoon of leaves for each cup, pour the water "
    "over them and wait three to five minutes before you serve it.",
]
PROMPTS = ["Once upon a time, in a small village by the sea,", "The three primary colors are"]
N_GREEDY = 12
TOP = 5


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def compute(model):
    from llama_cpp import Llama, __version__
    llm = Llama(model_path=model, n_ctx=512, logits_all=True, verbose=False, seed=0)
    out = {"generator": "tests/grade/01_kv_cache/llama_cpp_next_tokens.py",
           "oracle": f"llama.cpp via llama-cpp-python {__version__}",
           "model_sha256": sha256(model), "texts": [], "prompts": []}
    for text in TEXTS:
        ids = llm.tokenize(text.encode(), add_bos=False, special=False)
        llm.reset()
        llm.eval(ids)
        scores = np.array(llm.scores[: len(ids)], dtype=np.float32)
        top = np.argsort(-scores, axis=-1, kind="stable")[:, :TOP]
        out["texts"].append({"ids": [int(t) for t in ids], "top5": top.astype(int).tolist()})
    for prompt in PROMPTS:
        ids = llm.tokenize(prompt.encode(), add_bos=False, special=False)
        llm.reset()
        llm.eval(ids)
        steps = []
        for _ in range(N_GREEDY):
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            t2 = np.argsort(-row, kind="stable")[:2]
            steps.append({"top2": [int(t2[0]), int(t2[1])], "logits": [float(row[t2[0]]), float(row[t2[1]])]})
            llm.eval([int(t2[0])])
        out["prompts"].append({"text": prompt, "ids": [int(t) for t in ids], "greedy": steps})
    return out


def check(new, old):
    problems = []
    if new["model_sha256"] != old["model_sha256"]:
        problems.append("the model file differs from the one the fixture was made from")
    agree = total = 0
    for a, b in zip(new["texts"], old["texts"]):
        if a["ids"] != b["ids"]:
            problems.append("a text tokenizes differently")
            continue
        agree += sum(x[0] == y[0] for x, y in zip(a["top5"], b["top5"]))
        total += len(a["ids"])
    if total and agree / total < 0.98:
        problems.append(f"top-1 equal at {agree}/{total} positions (< 98%)")
    for a, b in zip(new["prompts"], old["prompts"]):
        for i, (x, y) in enumerate(zip(a["greedy"], b["greedy"])):
            if x["top2"][0] != y["top2"][0]:
                margin = abs(y["logits"][0] - y["logits"][1])
                if x["top2"][0] != y["top2"][1] or margin > 0.5:
                    problems.append(f"prompt {a['text']!r}: greedy differs at step {i} (margin {margin:.3f})")
                break
    print(f"top-1 equal at {agree}/{total} teacher-forced positions")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--out", help="write the fixture here")
    g.add_argument("--check", help="recompute and compare with this fixture")
    a = ap.parse_args()
    new = compute(a.model)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(new, f, separators=(",", ":"))
            f.write("\n")
        print(f"wrote {a.out}: {sum(len(t['ids']) for t in new['texts'])} positions, {len(new['prompts'])} prompts")
        return 0
    with open(a.check) as f:
        old = json.load(f)
    problems = check(new, old)
    for p in problems:
        print("FAIL:", p)
    print("PASS" if not problems else "FAIL")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
