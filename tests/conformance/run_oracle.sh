#!/usr/bin/env bash
# run_oracle.sh PYTHON MODEL SCRIPT ARGS... — runs an oracle script with the venv python,
# or exits 77 (ctest SKIP) when the venv or the model is missing.
py="$1"; model="$2"; shift 2
if [[ ! -x "$py" ]]; then echo "SKIP: no venv python at $py (run scripts/setup.sh)"; exit 77; fi
if [[ ! -f "$model" ]]; then echo "SKIP: no model at $model (run scripts/fetch_model.sh)"; exit 77; fi
exec "$py" "$@"
