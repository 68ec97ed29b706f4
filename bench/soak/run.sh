#!/usr/bin/env bash
# bench/soak/run.sh — lio-server soaked under mixed traffic (bench/soak/soak.py says what and how
# it passes). Runs the Release build's lio-server (build/bin; `cmake --preset default && cmake
# --build --preset default` first) on the default model with the venv's Python (scripts/setup.sh).
#
#   bash bench/soak/run.sh                                # one hour, results in bench/results/soak_cpu.*
#   bash bench/soak/run.sh --duration-s 90 --out none     # a short form, no results files (ctest's server_soak)
#   bash bench/soak/run.sh --device cuda --out bench/results/soak_h100
#
# Any other flag goes to soak.py (--clients, --kv-cache-mib, --warmup-s, --rss-tolerance-mib, ...).
# Exit: 0 every check passed, 1 a check failed, 77 no venv, model or server binary (ctest: SKIP).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
py="${LIO_VENV_PYTHON:-$root/.venv/bin/python}"
server="${LIO_SERVER:-$root/build/bin/lio-server}"
model="${LIO_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
duration=3600 out="$root/bench/results/soak_cpu" rest=()
while (($#)); do
  case "$1" in
    --duration-s) duration="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --server) server="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    *) rest+=("$1"); shift ;;
  esac
done
for need in "$py" "$server" "$model"; do
  if [[ ! -e "$need" ]]; then echo "SKIP: $need not found (scripts/setup.sh, then the default build)"; exit 77; fi
done
args=(--server "$server" --model "$model" --duration-s "$duration")
[[ -n "$out" && "$out" != none ]] && args+=(--out "$out")
# OpenMP threads sleep while they wait, so the client threads get a core on a small machine.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}" PYTHONUNBUFFERED=1
exec "$py" "$root/bench/soak/soak.py" "${args[@]}" "${rest[@]+"${rest[@]}"}"
