#!/usr/bin/env python3
"""ch01_kv_cache on the real model: greedy tokens identical with and without the KV
cache, the measured KV bytes equal the formula, and the answer is real text."""
import argparse
import json
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ch01", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    out = subprocess.run([a.ch01, "--model", a.model, "--chat", "--prompt",
                          "What is the capital of France?", "--max-tokens", "24", "--json"],
                         stdout=subprocess.PIPE, text=True)
    j = json.loads(out.stdout)
    kv, rc = j["kv_cache"], j["recompute"]
    print(f"kv-cache text: {kv['text']!r}")
    print(f"identical {j['identical']}, kv_bytes {kv['kv_bytes']} vs formula {j['kv_bytes_formula']}, "
          f"speedup {j['speedup_total']:.2f}x")
    ok = (j["identical"] and kv["token_ids"] == rc["token_ids"] and len(kv["token_ids"]) > 0
          and kv["kv_bytes"] == j["kv_bytes_formula"] and "Paris" in kv["text"] and out.returncode == 0)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
