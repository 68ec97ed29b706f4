#!/usr/bin/env bash
# build_llama_server.sh — builds llama.cpp's llama-server (CPU only), the peer of lio-server in
# the serving benchmark (scripts/bench_serve.sh), from the llama.cpp source vendored in the
# pinned llama-cpp-python sdist (COURSE.md, "Performance method"). Once: does nothing when
# build-llama/bin/llama-server exists. The work is bench/batched/build_llama_tools.sh's (one
# script downloads, configures and builds every llama.cpp peer); this names the server part.
#   scripts/build_llama_server.sh            # JOBS=$(nproc)
#   JOBS=1 nice -n 19 scripts/build_llama_server.sh   # on a busy 2-core machine
# Env: LLAMA_BUILD_DIR (default build-llama/, gitignored), JOBS.
# Output: $LLAMA_BUILD_DIR/bin/llama-server.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec bash "$root/bench/batched/build_llama_tools.sh" --server
