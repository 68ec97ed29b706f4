#!/usr/bin/env bash
# ch01_smoke.sh BIN_DIR WORK_DIR — chapter 01's executable end to end on a tiny random model: it
# generates with and without the KV cache, the tokens agree, the measured cache bytes match the
# formula, and its attention is chapter 01's decode_attention over one contiguous block (the
# only program that runs Task 4; the engine reads every row through chapter 04's block tables).
source "$(dirname "$0")/smoke_setup.sh" "$@"
if ! "$bin/ch01_kv_cache" --model "$work/models/tiny.gguf" --prompt "hello" --max-tokens 12 --threads 1 \
    --json >"$work/out.json" 2>"$work/err"; then
  echo "FAIL: ch01_kv_cache exited non-zero"; cat "$work/err"; exit 1
fi
python3 - "$work/out.json" <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
fails = []
if "decode_attention" not in d["device"]:
    fails.append(f"attention must be chapter 01's decode_attention, device says: {d['device']}")
if not d["identical"]:
    fails.append("tokens with and without the cache differ")
if d["kv_cache"]["n_generated_tokens"] < 1:
    fails.append("nothing generated")
if d["kv_cache"]["kv_bytes"] != d["kv_bytes_formula"]:
    fails.append(f"cache bytes {d['kv_cache']['kv_bytes']} vs formula {d['kv_bytes_formula']}")
for f in fails:
    print("FAIL", f)
print("ok   ch01_smoke" if not fails else f"{len(fails)} checks failed")
sys.exit(1 if fails else 0)
PY

# --memory-budget runs Tasks 1 and 2 on the loaded model: the batch that fits a budget written
# in GB (10^9 bytes) beside the model file, checked here against the formula.
if ! "$bin/ch01_kv_cache" --model "$work/models/tiny.gguf" --prompt "hello" --max-tokens 2 --threads 1 \
    --memory-budget 1GB --seq-len 100 --no-kv-cache --json >"$work/budget.json" 2>"$work/err"; then
  echo "FAIL: ch01_kv_cache --memory-budget exited non-zero"; cat "$work/err"; exit 1
fi
python3 - "$work/budget.json" <<'PY' || exit 1
import json, sys
rows = json.load(open(sys.argv[1]))["memory_budget"]
fails = []
for r in rows:
    want = (10**9 - int(r["weights_bytes"])) // r["kv_bytes_per_sequence"]
    if r["max_batch"] != want:
        fails.append(f"{r['kv_dtype']}: max_batch {r['max_batch']}, want (1e9 - weights) // per-sequence = {want}")
if len(rows) != 2:
    fails.append(f"expected f32 and f16 rows, got {rows}")
for f in fails:
    print("FAIL", f)
print("ok   ch01_smoke --memory-budget" if not fails else f"{len(fails)} checks failed")
sys.exit(1 if fails else 0)
PY
if "$bin/ch01_kv_cache" --model "$work/models/tiny.gguf" --prompt "hello" --memory-budget 24GiG >/dev/null 2>"$work/err" \
    || ! grep -q "unknown unit" "$work/err"; then
  echo "FAIL: --memory-budget 24GiG must be refused naming the unit"; cat "$work/err"; exit 1
fi
echo "ok   ch01_smoke --memory-budget refuses an unknown unit"
