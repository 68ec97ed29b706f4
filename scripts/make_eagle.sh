#!/usr/bin/env bash
# make_eagle.sh [--model F] [--prompts P] [--max-tokens N] [--threads T] [train_eagle.py flags...]
# — an EAGLE-1 drafter for a model, on this machine, in one command (issue 63; chapter 06):
#   1. `lio spec-data`: greedy answers to the training prompts and the model's hidden state at every
#      position (self-distillation), to <model stem>.spec_data.safetensors beside the model; reused
#      when that file exists and is newer than the model and the prompts file (make_medusa.sh's data)
#   2. scripts/train_eagle.py (JAX on the CPU): the one-layer drafter on those states, written to
#      <model stem>.eagle.safetensors beside the model (models/ is never committed)
# Defaults: the default model (models/SmolLM2-135M-Instruct.Q4_1.gguf), the 300 prompts of
# bench/06_speculative/prompts_train.jsonl, 128 tokens each; each phase prints its time.
# Flags not listed above go to train_eagle.py (--epochs, --lr, --vocab, --out, ...).
# Needs build/bin/lio (scripts/setup.sh) and the venv's jax + optax + gguf (scripts/requirements.txt).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="${LIO_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
prompts="$root/bench/06_speculative/prompts_train.jsonl"
max_tokens=128
threads=0
lio="${LIO_BIN:-$root/build/bin}/lio"
python="${LIO_PYTHON:-$root/.venv/bin/python}"
train_flags=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model="$2"; shift ;;
    --prompts) prompts="$2"; shift ;;
    --max-tokens) max_tokens="$2"; shift ;;
    --threads) threads="$2"; shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) train_flags+=("$1") ;;
  esac
  shift
done
[[ -f "$model" ]] || { echo "make_eagle.sh: no model at $model (scripts/fetch_model.sh)" >&2; exit 2; }
"$python" -c "import jax, optax, gguf" 2>/dev/null ||
  { echo "make_eagle.sh: $python lacks jax / optax / gguf (scripts/setup.sh installs scripts/requirements.txt)" >&2; exit 2; }

# Idle OpenMP threads sleep instead of spinning (see make_medusa.sh).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
stem="${model%.gguf}"
data="$stem.spec_data.safetensors"
t0=$SECONDS
if [[ -f "$data" && "$data" -nt "$model" && "$data" -nt "$prompts" ]]; then
  echo "[make_eagle] reusing $data (newer than the model and $prompts; delete it to regenerate)" >&2
else
  [[ -x "$lio" ]] || { echo "make_eagle.sh: no $lio (scripts/setup.sh builds it)" >&2; exit 2; }
  "$lio" spec-data --model "$model" --prompts "$prompts" --out "$data" --max-tokens "$max_tokens" \
    --threads "$threads" >/dev/null
fi
t1=$SECONDS
echo "[make_eagle] spec-data took $((t1 - t0)) s" >&2
"$python" "$root/scripts/train_eagle.py" --data "$data" --model "$model" ${train_flags[@]+"${train_flags[@]}"}
echo "[make_eagle] training took $((SECONDS - t1)) s; total $((SECONDS - t0)) s" >&2
