#!/usr/bin/env bash
# test.sh — sets up (if needed), then runs the whole test suite:
#   1. the default build: unit, CUDA (skipped without a GPU), CLI bad-input and conformance
#      tests (real model against llama.cpp and Hugging Face tokenizers);
#      then the Doxygen API reference, which must build without a warning;
#   2. the same unit and bad-input tests under AddressSanitizer + UBSan (preset "asan": Clang;
#      the same tree builds the fuzz targets of stage 4, so each object is compiled once).
#   3. with --check-stubs (CI): every chapter's grading tests built against the unsolved
#      stubs in exercises/ must fail, every test case of them (a test that passes on a stub is
#      a bug in the test). Not for learners whose exercises are already solved.
#   4. coverage-guided fuzzing (test preset "fuzz" on the asan tree: libFuzzer, ASan + UBSan): each
#      reader of untrusted bytes (tests/fuzz) runs LIO_FUZZ_SECONDS (10) from its committed seeds;
#      any crash, sanitizer report, leak or stray exception fails (scripts/fuzz.sh runs longer).
#   5. ThreadSanitizer (preset "tsan", no OpenMP, the CPU kernels uninstrumented): the server's
#      engine loop, metrics and serving loop tests, and lio-server's bad-request, disconnect and
#      shutdown tests (HTTP threads, the engine thread, cancellation between them); any data race
#      or lock-order report fails.
# Every test that waits on the clock multiplies its waits by the slow factor that the first test
# of each preset measures for that build on this machine (tests/support/machine_speed.py).
# The default and asan test presets run two tests at a time with OMP_WAIT_POLICY=passive: two
# OpenMP programs spinning on 2 cores starve each other (measured: the two logits conformance
# tests took 156 s side by side with spinning threads, 117 s passive; SmolLM2's alone 101 -> 37 s).
# Flags: --no-asan skips stage 2; --check-stubs adds stage 3; --no-fuzz skips stage 4;
# --no-tsan skips stage 5.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
asan=1
fuzz=1
tsan=1
check_stubs=0
for arg in "$@"; do
  case "$arg" in
    --no-asan) asan=0 ;;
    --no-fuzz) fuzz=0 ;;
    --no-tsan) tsan=0 ;;
    --check-stubs) check_stubs=1 ;;
    *) echo "test.sh: unknown flag $arg" >&2; exit 2 ;;
  esac
done

stage() { echo; echo "=== $* ($(date +%T))"; }
t0=$SECONDS
stage "setup + build (default preset)"
bash scripts/setup.sh
# setup.sh has just installed chromium and Playwright: here the chat page's browser test must run,
# and fails instead of skipping if either is missing (tests/server/test_web_page.py).
export LIO_REQUIRE_BROWSER=1
stage "ctest (default preset)"
ctest --preset default
if command -v doxygen >/dev/null; then
  stage "API reference (Doxygen; fails on any warning in public headers)"
  cmake --build --preset default --target docs
fi
if ((check_stubs)); then
  stage "stub check: grading tests must fail on exercises/ stubs"
  cmake --preset default -DLIO_CHECK_STUBS=ON >/dev/null
  cmake --build --preset default -j "$(nproc)"
  ctest --preset default -L stubcheck
  cmake --preset default -DLIO_CHECK_STUBS=OFF >/dev/null
fi
if ((asan || fuzz)); then
  # One Clang tree for both: the build preset "asan" makes the unit tests and the fuzz targets,
  # "fuzz" the fuzz targets alone (with --no-asan).
  stage "build (asan preset: ASan + UBSan tests and the libFuzzer targets, one tree)"
  cmake --preset asan >/dev/null
  cmake --build --preset "$( ((asan)) && echo asan || echo fuzz)" -j "$(nproc)"
fi
if ((asan)); then
  stage "ctest (asan preset: unit + bad input)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --preset asan
fi
if ((fuzz)); then
  stage "ctest (fuzz preset: libFuzzer on every reader of untrusted bytes, from its seeds, bounded)"
  ctest --preset fuzz
fi
if ((tsan)); then
  stage "build (tsan preset: ThreadSanitizer on the engine loop, the server and their tests)"
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan -j "$(nproc)"
  stage "ctest (tsan preset)"
  ctest --preset tsan
fi
stage "all tests passed in $((SECONDS - t0)) s"
