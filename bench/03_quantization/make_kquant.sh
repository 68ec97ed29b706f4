#!/usr/bin/env bash
# Chapter 03: the K-quant files most people download, made by llama.cpp itself. llama-quantize
# (built once from the llama.cpp vendored in the pinned llama-cpp-python sdist,
# bench/batched/build_llama_tools.sh --quantize) turns the F32 reference copy into each TYPE.
# SmolLM2-135M's rows are 576 wide, not a multiple of the K-quants' 256-element super-block, so
# llama.cpp falls back for those matrices (llama-quant.cpp: Q4_K -> Q5_0, Q6_K -> Q8_0) and only
# the 1536-wide ffn_down rows are K-quant blocks: the mix LIO's kernels must all run.
#
# Usage: bench/03_quantization/make_kquant.sh [TYPE ...]   (default: Q4_K_M Q6_K)
# Env: LLAMA_BUILD_DIR (build-llama), MODEL (models/SmolLM2-135M-Instruct.F32.gguf),
#   THREADS (nproc).
# Output: models/SmolLM2-135M-Instruct.<TYPE>.gguf (gitignored; never committed), and the
#   per-type tensor counts on stdout.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
llama_build="${LLAMA_BUILD_DIR:-$root/build-llama}"
model="${MODEL:-models/SmolLM2-135M-Instruct.F32.gguf}"
threads="${THREADS:-$(nproc)}"
types=("$@")
[[ ${#types[@]} -eq 0 ]] && types=(Q4_K_M Q6_K)
[[ -r "$model" ]] || { echo "make_kquant: cannot read MODEL=$model (scripts/setup.sh makes it)" >&2; exit 1; }
LLAMA_BUILD_DIR="$llama_build" bash bench/batched/build_llama_tools.sh --quantize
for t in "${types[@]}"; do
  out="models/SmolLM2-135M-Instruct.$t.gguf"
  "$llama_build/bin/llama-quantize" "$model" "$out" "$t" "$threads" >/dev/null 2>"$out.log" ||
    { echo "make_kquant: llama-quantize $t failed; see $out.log" >&2; exit 1; }
  echo "$out: $(stat -c %s "$out") bytes; tensor types:" \
       "$(grep -oE 'converting to [A-Za-z0-9_]+' "$out.log" | grep -oE '[A-Za-z0-9_]+$' | sort | uniq -c | tr -s ' ' | tr '\n' ',')"
  rm -f "$out.log"
done
