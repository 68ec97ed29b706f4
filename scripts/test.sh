#!/usr/bin/env bash
# test.sh — sets up (if needed), then runs the whole test suite:
#   1. the default build: unit, CUDA (skipped without a GPU), CLI bad-input and conformance
#      tests (real model against llama.cpp and Hugging Face tokenizers);
#   2. the same unit and bad-input tests under AddressSanitizer + UBSan (preset "asan").
# Flags: --no-asan skips stage 2.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
asan=1
[[ "${1:-}" == "--no-asan" ]] && asan=0

stage() { echo; echo "=== $* ($(date +%T))"; }
t0=$SECONDS
stage "setup + build (default preset)"
bash scripts/setup.sh
stage "ctest (default preset)"
ctest --preset default
if ((asan)); then
  stage "build (asan preset)"
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$(nproc)"
  stage "ctest (asan preset: unit + bad input)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --preset asan
fi
stage "all tests passed in $((SECONDS - t0)) s"
