#!/usr/bin/env bash
# ch04_smoke.sh BIN_DIR WORK_DIR — chapter 04's executable end to end on a tiny random model: a
# trace file replayed through the engine; the paged pool must reserve less than a static
# max-length reservation and waste less; every generated token is accounted for; block tables
# are printed; a malformed trace is a one-line error.
source "$(dirname "$0")/smoke_setup.sh" "$@"
printf '{"prompt_tokens": 20, "output_tokens": 10}\n{"prompt_tokens": 40, "output_tokens": 5, "shared_prefix": true}\n{"prompt_tokens": 30, "output_tokens": 12, "shared_prefix": true}\n' >"$work/trace.jsonl"
if ! "$bin/ch04_paged_attention" --model "$work/models/tiny.gguf" --trace "$work/trace.jsonl" --shared-prefix 16 \
    --kv-cache-mib 1 --threads 1 --json >"$work/out.json" 2>"$work/err"; then
  echo "FAIL: ch04_paged_attention exited non-zero"; cat "$work/err"; exit 1
fi
python3 - "$work/out.json" <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
fails = []
if d["trace"]["n_requests"] != 3 or d["trace"]["output_tokens"] != 27:
    fails.append(f"trace: {d['trace']}")
if not d["paged"]["peak_reserved_tokens"] < d["static"]["peak_reserved_tokens"]:
    fails.append("the paged pool must reserve less than a static max-length reservation")
if not d["paged"]["mean_wasted_pct"] < d["static"]["mean_wasted_pct"]:
    fails.append("the paged pool must waste less")
if not d["block_tables"]["sequences"]:
    fails.append("no block tables printed")
for f in fails:
    print("FAIL", f)
print("ok   ch04_smoke" if not fails else f"{len(fails)} checks failed")
sys.exit(1 if fails else 0)
PY
printf '{"prompt_tokens": 0, "output_tokens": 3}\n' >"$work/bad.jsonl"
if "$bin/ch04_paged_attention" --model "$work/models/tiny.gguf" --trace "$work/bad.jsonl" >"$work/bad_out" 2>&1; then
  echo "FAIL: a zero-length prompt was accepted"; exit 1
fi
if [[ $(wc -l <"$work/bad_out") -gt 2 ]] || ! grep -q "bad.jsonl" "$work/bad_out"; then
  echo "FAIL: the bad trace's error should be one line naming the file:"; cat "$work/bad_out"; exit 1
fi
echo "ok   ch04_smoke (bad trace: $(head -1 "$work/bad_out"))"
