#!/usr/bin/env bash
# reproduce.sh — every CPU speedup table of the course from one command (bench/reproduce.py has
# the details): bench/reproduce.sh [--quick] [--chapter NN ...] [--list] [--keep-going]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="$root/.venv/bin/python"
[[ -x "$py" ]] || { echo "reproduce: $py missing: run scripts/setup.sh first (it makes the venv and fetches the models)" >&2; exit 2; }
exec "$py" "$root/bench/reproduce.py" "$@"
