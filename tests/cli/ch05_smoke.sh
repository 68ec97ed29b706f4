#!/usr/bin/env bash
# ch05_smoke.sh BIN_DIR WORK_DIR — chapter 05's executable end to end on a tiny random model: a
# 4-request trace replayed through the engine under static and continuous batching (batch 2);
# continuous batching must keep more slots busy and finish in fewer steps; every output token
# is generated under both policies; the static first batch's measured average batch matches
# the formula sum/max; a malformed trace is a one-line error.
source "$(dirname "$0")/smoke_setup.sh" "$@"
printf '{"output_tokens": 12}\n{"output_tokens": 2, "prompt_tokens": 8}\n\n{"output_tokens": 5}\n{"output_tokens": 3}\n' >"$work/trace.jsonl"
if ! "$bin/ch05_continuous_batching" --model "$work/models/tiny.gguf" --trace "$work/trace.jsonl" \
    --max-num-seqs 2 --kv-cache-mib 1 --threads 1 --json >"$work/out.json" 2>"$work/err"; then
  echo "FAIL: ch05_continuous_batching exited non-zero"; cat "$work/err"; exit 1
fi
python3 - "$work/out.json" <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
fails = []
s, c, m = d["static"], d["continuous"], d["summary"]
if d["trace"]["n_requests"] != 4 or d["trace"]["output_tokens"] != 22:
    fails.append(f"trace: {d['trace']}")
for name, p in (("static", s), ("continuous", c)):
    if p["generated_tokens"] != 22:
        fails.append(f"{name}: {p['generated_tokens']} of 22 tokens generated")
    if [q["generated_tokens"] for q in p["requests"]] != [12, 2, 5, 3]:
        fails.append(f"{name}: per-request lengths {[q['generated_tokens'] for q in p['requests']]}")
if not c["avg_batch"] > s["avg_batch"]:
    fails.append(f"average batch: continuous {c['avg_batch']} must beat static {s['avg_batch']}")
if not c["steps"] < s["steps"]:
    fails.append(f"steps: continuous {c['steps']} must be fewer than static {s['steps']}")
# static: batches (A, B) then (C, D) -> 12 + 5 steps; continuous: C joins when B ends
if s["steps"] != 17 or c["steps"] != 12:
    fails.append(f"steps: static {s['steps']} (want 17), continuous {c['steps']} (want 12)")
fb = m["static_first_batch"]
if abs(fb["formula_avg_batch"] - 14 / 12) > 1e-9 or abs(fb["measured_avg_batch"] - fb["formula_avg_batch"]) > 1e-9:
    fails.append(f"static first batch: {fb}")
if [q["first_step"] for q in c["requests"]][2] != 3 or [q["first_step"] for q in s["requests"]][2] != 13:
    fails.append("request C must start at step 3 (continuous) and step 13 (static)")
if not s["timeline"] or not all(len(seg["slots"]) == 2 for seg in s["timeline"] + c["timeline"]):
    fails.append("the timelines must show 2 slots")
for f in fails:
    print("FAIL", f)
print("ok   ch05_smoke" if not fails else f"{len(fails)} checks failed")
sys.exit(1 if fails else 0)
PY
printf '{"output_tokens": 4}\n{"output_tokens": 0}\n' >"$work/bad.jsonl"
if "$bin/ch05_continuous_batching" --model "$work/models/tiny.gguf" --trace "$work/bad.jsonl" >"$work/bad_out" 2>&1; then
  echo "FAIL: a zero-length output was accepted"; exit 1
fi
if [[ $(wc -l <"$work/bad_out") -gt 2 ]] || ! grep -q "bad.jsonl:2" "$work/bad_out"; then
  echo "FAIL: the bad trace's error should be one line naming file:line:"; cat "$work/bad_out"; exit 1
fi
echo "ok   ch05_smoke (bad trace: $(head -1 "$work/bad_out"))"
