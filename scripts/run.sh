#!/usr/bin/env bash
# run.sh — sets up what running needs (if needed) and asks the default model a question through
# the engine, streaming the answer token by token. It installs only the run-time packages,
# fetches the model and builds only `lio` (CPU only unless a GPU is present): the test suite,
# the oracle venv, the benchmarks and the CUDA kernels come with scripts/test.sh (or a full
# scripts/setup.sh). Extra arguments go to `lio generate`, e.g.
#   scripts/run.sh --prompt "Write a haiku about caches." --max-tokens 64
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh" --run
args=("$@")
# The default question and length unless the arguments give their own.
[[ " $* " == *" --prompt "* ]] ||
  args=(--prompt "What is a KV cache in LLM inference? Answer in two sentences." "${args[@]}")
[[ " $* " == *" --max-tokens "* ]] || args+=(--max-tokens 96)
exec "$root/build/bin/lio" generate --chat "${args[@]}"
