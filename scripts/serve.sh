#!/usr/bin/env bash
# serve.sh — starts lio-server, the OpenAI-compatible server (chapter 09), on the default model
# (models/SmolLM2-135M-Instruct.Q4_1.gguf, or $LIO_MODEL), running `scripts/setup.sh --run
# --target lio-server` first when the build or the model is missing. Extra arguments go to lio-server, e.g.
#   scripts/serve.sh --port 8080 --api-key sk-local --prefix-cache radix
#   scripts/serve.sh --device cuda --kv-cache-mib 4096
# Then talk to it with any OpenAI client (base_url http://127.0.0.1:8000/v1), or:
#   curl http://127.0.0.1:8000/v1/chat/completions -d '{"messages": [{"role": "user", "content": "Hi!"}]}'
# After changing code (your own chapter exercises, say), rebuild: cmake --build build --target lio-server
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="${LIO_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
if [[ ! -x "$root/build/bin/lio-server" || ! -e "$model" ]]; then
  bash "$root/scripts/setup.sh" --run --target lio-server
fi
# Idle OpenMP threads sleep instead of spinning: on a few cores shared with clients (a
# benchmark, a test), spinning workers stall everyone for whole time slices.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
exec "$root/build/bin/lio-server" "$@"
