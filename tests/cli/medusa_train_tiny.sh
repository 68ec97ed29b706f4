#!/usr/bin/env bash
# medusa_train_tiny.sh BIN_DIR WORK_DIR PYTHON — issue 63's drafter pipeline end to end on the tiny
# random model, in seconds: `lio spec-data` (greedy answers, every position's hidden state) on a
# few prompts of both forms, then scripts/train_medusa.py (JAX) trains 2 heads. Checks the data
# file's tensors and shapes (N positions = prompts + answers, hidden (N, 64), seq_starts (S + 1)),
# the heads file's tensors and shapes (the format scripts/train_medusa.py documents), and that
# training lowered the held-out loss. Skips (77) when PYTHON lacks jax / optax.
source "$(dirname "$0")/smoke_setup.sh" "$1" "$2"
python="$3"
root="$(cd "$(dirname "$0")/../.." && pwd)"
if ! "$python" -c "import jax, optax, gguf" 2>/dev/null; then
  echo "SKIP: $python lacks jax / optax / gguf (scripts/setup.sh installs scripts/requirements.txt)"; exit 77
fi

{
  for i in $(seq 1 12); do
    echo "{\"prompt\": \"the cat sat on mat number $i and then\"}"
    echo "{\"messages\": [{\"role\": \"user\", \"content\": \"tell me about the $i-th thing\"}]}"
  done
} >"$work/prompts.jsonl"

if ! "$bin/lio" spec-data --model "$work/models/tiny.gguf" --prompts "$work/prompts.jsonl" \
    --out "$work/data.safetensors" --max-tokens 24 --ignore-eos --threads 1 --kv-cache-mib 4 \
    >"$work/summary.json" 2>"$work/err"; then
  echo "FAIL: lio spec-data exited non-zero"; cat "$work/err"; exit 1
fi
tail -n 2 "$work/err"

if ! OMP_NUM_THREADS=1 "$python" "$root/scripts/train_medusa.py" --data "$work/data.safetensors" \
    --model "$work/models/tiny.gguf" --out "$work/medusa.safetensors" --heads 2 --vocab 128 \
    --epochs 4 --batch 64 --lr 3e-3 --holdout 0.2 >"$work/train.json" 2>"$work/train_err"; then
  echo "FAIL: train_medusa.py exited non-zero"; cat "$work/train_err"; exit 1
fi
tail -n 3 "$work/train_err"

"$python" - "$work" "$root/scripts" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
from train_medusa import read_safetensors
work = sys.argv[1]
fails = []
def check(cond, what):
    if not cond:
        fails.append(what)
data, meta = read_safetensors(f"{work}/data.safetensors")
s = json.load(open(f"{work}/summary.json"))
n, S, d = s["n_tokens"], s["n_sequences"], 64
check(S == 24, f"expected 24 sequences, got {S}")
check(s["n_generated_tokens"] == 24 * 24, f"expected 576 generated tokens, got {s['n_generated_tokens']}")
check(list(data["tokens"].shape) == [n], f"tokens shape {data['tokens'].shape}")
check(list(data["hidden"].shape) == [n, d], f"hidden shape {data['hidden'].shape}")
check(list(data["seq_starts"].shape) == [S + 1] and data["seq_starts"][0] == 0 and data["seq_starts"][-1] == n,
      f"seq_starts {list(data['seq_starts'])}")
check(list(data["prompt_lens"].shape) == [S], f"prompt_lens shape {data['prompt_lens'].shape}")
lens = data["seq_starts"][1:] - data["seq_starts"][:-1]
check(all(lens == data["prompt_lens"] + 24), "sequence lengths are not prompt + 24")
check(meta.get("d_model") == "64", f"metadata d_model {meta.get('d_model')}")

heads, hmeta = read_safetensors(f"{work}/medusa.safetensors")
v = int(hmeta["draft_vocab_size"])
want = {"medusa.vocab": [v], "medusa.lm_head": [v, d]}
for k in range(2):
    want[f"medusa.{k}.weight"] = [d, d]
    want[f"medusa.{k}.bias"] = [d]
check(sorted(heads) == sorted(want), f"tensors {sorted(heads)}")
for name, shape in want.items():
    if name in heads:
        check(list(heads[name].shape) == shape, f"{name} shape {list(heads[name].shape)}, want {shape}")
check(heads["medusa.vocab"].dtype.name == "int32", "medusa.vocab is not I32")
check(0 < v <= 128, f"draft vocabulary {v}")
check(hmeta.get("num_heads") == "2" and hmeta.get("d_model") == "64", f"metadata {hmeta}")
check(abs(heads["medusa.0.weight"]).max() > 0, "head 0's weight is still zero: nothing trained")
r = json.load(open(f"{work}/train.json"))
check(r["loss_final"] < r["loss_initial"], f"held-out loss did not fall: {r['loss_initial']} -> {r['loss_final']}")
if fails:
    print("FAIL:\n  " + "\n  ".join(fails)); sys.exit(1)
print(f"ok: {S} sequences, {n} positions; 2 heads, draft vocabulary {v}; held-out loss "
      f"{r['loss_initial']:.3f} -> {r['loss_final']:.3f}")
PY
