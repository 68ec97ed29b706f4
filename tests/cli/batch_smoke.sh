#!/usr/bin/env bash
# batch_smoke.sh BIN_DIR WORK_DIR — `lio batch` end to end on a tiny random model: five
# requests of every prompt form (one too long for the 256-token context), greedy with
# --ignore-eos. Checks one result line per request, in input order; the long one carries
# "error" and finish_reason null while the others run; every other request generates exactly
# its max_tokens (the default, or its own override); the summary file adds up.
source "$(dirname "$0")/smoke_setup.sh" "$@"

long_prompt=$(printf 'token %.0s' $(seq 1 400))
cat >"$work/prompts.jsonl" <<EOF
{"prompt": "the cat sat on"}
{"messages": [{"role": "user", "content": "hi there"}]}

{"prompt": "$long_prompt"}
{"prompt_token_ids": [5, 6, 7, 8, 9, 10], "max_tokens": 3}
{"prompt": "in the beginning", "temperature": 0.8, "top_p": 0.9, "seed": 7, "stop": []}
EOF

if ! "$bin/lio" batch --model "$work/models/tiny.gguf" --prompts "$work/prompts.jsonl" \
    --out "$work/out.jsonl" --summary "$work/summary.json" --max-tokens 8 --ignore-eos \
    --max-num-seqs 2 --max-num-batched-tokens 16 --kv-cache-mib 1 --threads 1 2>"$work/err"; then
  echo "FAIL: lio batch exited non-zero"; cat "$work/err"; exit 1
fi
cat "$work/err"

python3 - "$work/out.jsonl" "$work/summary.json" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
summary = json.load(open(sys.argv[2]))
fails = []
def check(cond, what):
    if not cond:
        fails.append(what)
check(len(lines) == 5, f"expected 5 result lines, got {len(lines)}")
check([l.get("index") for l in lines] == [0, 1, 2, 3, 4], f"indices out of order: {[l.get('index') for l in lines]}")
want_tokens = {0: 8, 1: 8, 3: 3, 4: 8}
for l in lines:
    i = l.get("index")
    if i == 2:
        check("the context holds" in l.get("error", ""), f"line 2 lacks the context error: {l}")
        check(l.get("finish_reason") is None, f"line 2 finish_reason should be null: {l}")
        check(l.get("n_generated_tokens") == 0, f"line 2 generated tokens: {l}")
        continue
    check("error" not in l, f"request {i} failed: {l.get('error')}")
    check(l.get("n_generated_tokens") == want_tokens.get(i), f"request {i}: n_generated_tokens {l.get('n_generated_tokens')} != {want_tokens.get(i)}")
    check(len(l.get("token_ids", [])) == l.get("n_generated_tokens"), f"request {i}: token_ids length mismatch")
    check(l.get("finish_reason") == "length", f"request {i}: finish_reason {l.get('finish_reason')}")
    check(l.get("n_prompt_tokens", 0) > 0, f"request {i}: n_prompt_tokens {l.get('n_prompt_tokens')}")
    check(l.get("ttft_ms", -1) >= 0 and l.get("e2e_ms", -1) >= l.get("ttft_ms", 0), f"request {i}: timings {l}")
check(lines[3].get("n_prompt_tokens") == 6 if len(lines) > 3 else False, "prompt_token_ids not taken as given")
check(summary.get("n_requests") == 5 and summary.get("n_failed") == 1, f"summary counts: {summary}")
check(summary.get("output_tokens") == sum(want_tokens.values()), f"summary output_tokens {summary.get('output_tokens')}")
check(summary.get("output_tok_per_s", 0) > 0, "summary output_tok_per_s")
check(summary.get("max_running", 99) <= 2, f"max_running {summary.get('max_running')} > --max-num-seqs 2")
for f in fails:
    print("FAIL", f)
print("ok   batch_smoke" if not fails else f"{len(fails)} checks failed")
sys.exit(1 if fails else 0)
PY
rc=$?
((rc == 0)) || exit $rc

# Chapter 04: parallel samples ("n") and a radix prefix cache. Greedy samples of one prompt are
# identical; every sample generates its max_tokens; the second request of the same prompt hits.
cat >"$work/samples.jsonl" <<EOF2
{"prompt": "the cat sat on the mat and looked at the dog", "n": 3, "max_tokens": 5}
{"prompt": "the cat sat on the mat and looked at the dog", "max_tokens": 5}
EOF2
if ! "$bin/lio" batch --model "$work/models/tiny.gguf" --prompts "$work/samples.jsonl" --out "$work/samples_out.jsonl" \
    --summary "$work/samples_summary.json" --ignore-eos --prefix-cache radix --max-num-seqs 3 --kv-cache-mib 1 \
    --threads 1 2>"$work/err2"; then
  echo "FAIL: lio batch with n and --prefix-cache exited non-zero"; cat "$work/err2"; exit 1
fi
python3 - "$work/samples_out.jsonl" "$work/samples_summary.json" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
s = json.load(open(sys.argv[2]))
fails = []
samples = lines[0].get("samples", [])
if len(samples) != 3 or [x.get("sample_index") for x in samples] != [0, 1, 2]:
    fails.append(f"expected 3 samples with sample_index 0..2: {lines[0]}")
if any(x.get("n_generated_tokens") != 5 for x in samples):
    fails.append(f"every sample generates 5 tokens: {samples}")
if len({tuple(x.get("token_ids", [])) for x in samples}) != 1 or samples[0].get("token_ids") != lines[1].get("token_ids"):
    fails.append("greedy samples of one prompt must be identical")
if s.get("forked_samples") != 2:
    fails.append(f"forked_samples {s.get('forked_samples')} != 2")
if not s.get("prefix_cache_queries"):
    fails.append(f"no prefix-cache queries counted: {s}")
for f in fails:
    print("FAIL", f)
print("ok   batch_smoke (n, prefix cache)" if not fails else f"{len(fails)} checks failed")
sys.exit(1 if fails else 0)
PY
rc=$?
((rc == 0)) || exit $rc

# --profile (issue 64): the same first run with every CPU op timed. Greedy output unchanged; the
# decode-only and other steps are counted as the summary counts them; each decode-only step runs
# one LM head matmul and one attention per layer; every step's ops and the rest add up to it.
if ! "$bin/lio" batch --model "$work/models/tiny.gguf" --prompts "$work/prompts.jsonl" \
    --out "$work/prof_out.jsonl" --summary "$work/prof_summary.json" --max-tokens 8 --ignore-eos \
    --max-num-seqs 2 --max-num-batched-tokens 16 --kv-cache-mib 1 --threads 1 --profile 2>"$work/err3"; then
  echo "FAIL: lio batch --profile exited non-zero"; cat "$work/err3"; exit 1
fi
python3 - "$work/out.jsonl" "$work/prof_out.jsonl" "$work/prof_summary.json" "$work/err3" <<'PY'
import json, sys
plain = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
prof = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
s = json.load(open(sys.argv[3]))
err = open(sys.argv[4]).read()
fails = []
def check(cond, what):
    if not cond:
        fails.append(what)
greedy = [0, 1, 3]  # request 4 samples at temperature 0.8 (seeded, but not the point here)
check([prof[i].get("token_ids") for i in greedy] == [plain[i].get("token_ids") for i in greedy],
      "--profile changed the greedy tokens")
p = s.get("profile", {})
dec, other = p.get("decode_steps", {}), p.get("other_steps", {})
check(dec.get("steps") == s.get("n_decode_steps") and dec.get("steps", 0) > 0,
      f"decode steps {dec.get('steps')} != n_decode_steps {s.get('n_decode_steps')}")
check(dec.get("steps", 0) + other.get("steps", 0) == s.get("n_steps"),
      f"profiled steps {dec.get('steps')} + {other.get('steps')} != n_steps {s.get('n_steps')}")
ops = {r["op"]: r for r in dec.get("ops", [])}
check(ops.get("matmul lm_head", {}).get("calls_per_step") == 1, f"LM head calls per decode step: {ops.get('matmul lm_head')}")
check(ops.get("attention", {}).get("calls_per_step", 0) >= 1, f"no attention in the decode steps: {list(ops)}")
check(all(r.get("weight_gbs", 1) > 0 for r in ops.values()), "a matmul with no GB/s")
for part in (dec, other):
    total = sum(r["ms_per_step"] for r in part.get("ops", []))
    check(abs(total - part.get("step_ms", -1)) < 1e-6 * max(1.0, total), f"ops do not add up to the step: {part}")
check("profile, decode-only steps" in err and "matmul lm_head" in err, "no profile table on stderr")
for f in fails:
    print("FAIL", f)
print("ok   batch_smoke (--profile)" if not fails else f"{len(fails)} checks failed")
sys.exit(1 if fails else 0)
PY
rc=$?
((rc == 0)) || exit $rc

# Structured outputs: a JSON schema, a JSON object (n = 2, sampled) and a grammar per line, and a
# schema that does not compile (that line's error only). A constrained answer that stopped on
# its own parses and follows its constraint; one cut at max_tokens is at least a prefix of it.
cat >"$work/structured.jsonl" <<'EOF3'
{"prompt": "the cat", "max_tokens": 40, "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 22, 333]}}, "required": ["ok", "n"], "additionalProperties": false}}}}
{"prompt": "the dog", "max_tokens": 60, "n": 2, "temperature": 1.0, "seed": 3, "response_format": {"type": "json_object"}}
{"messages": [{"role": "user", "content": "yes or no?"}], "max_tokens": 8, "grammar": "root ::= (\"yes\" | \"no\") \".\""}
{"prompt": "the end", "response_format": {"type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "nope"}}}}
EOF3
if ! "$bin/lio" batch --model "$work/models/tiny.gguf" --prompts "$work/structured.jsonl" --out "$work/structured_out.jsonl" \
    --summary "$work/structured_summary.json" --max-num-seqs 4 --kv-cache-mib 1 --threads 1 2>"$work/err3"; then
  echo "FAIL: lio batch with structured outputs exited non-zero"; cat "$work/err3"; exit 1
fi
python3 - "$work/structured_out.jsonl" "$work/structured_summary.json" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
summary = json.load(open(sys.argv[2]))
fails = []
def check(cond, what):
    if not cond:
        fails.append(what)
def outputs(l):
    return [(s.get("text"), s.get("finish_reason")) for s in l.get("samples", [])] or [(l.get("text"), l.get("finish_reason"))]
check(len(lines) == 4, f"expected 4 result lines, got {len(lines)}")
if len(lines) == 4:
    for text, reason in outputs(lines[0]):
        check(reason == "stop", f"schema line: finish_reason {reason}: {text!r}")
        try:
            v = json.loads(text)
            check(set(v) == {"ok", "n"} and isinstance(v["ok"], bool) and v["n"] in (1, 22, 333), f"schema line: {text!r}")
        except ValueError:
            fails.append(f"schema line does not parse: {text!r}")
    outs = outputs(lines[1])
    check(len(outs) == 2, f"json_object line: {len(outs)} samples")
    for text, reason in outs:
        check(text.startswith("{"), f"json_object sample does not start an object: {text!r}")
        if reason == "stop":
            check(isinstance(json.loads(text), dict), f"json_object sample: {text!r}")
    text, reason = outputs(lines[2])[0]
    check(text in ("yes.", "no.") and reason == "stop", f"grammar line: {text!r} ({reason})")
    check("json_schema" in lines[3].get("error", ""), f"bad schema line lacks its error: {lines[3]}")
    # One mask per constrained sample per decode step: at least one per generated token.
    constrained_tokens = sum(len(s.get("token_ids", [])) for l in lines[:3]
                             for s in (l.get("samples") or [l]))
    check(constrained_tokens > 0, "no constrained tokens in the output lines")
    check(summary.get("grammar_masks", 0) >= constrained_tokens,
          f"summary grammar_masks {summary.get('grammar_masks')} < {constrained_tokens} constrained tokens")
    check(summary.get("grammar_mask_s", -1) >= 0, f"summary grammar_mask_s {summary.get('grammar_mask_s')}")
for f in fails:
    print("FAIL", f)
print("ok   batch_smoke structured outputs" if not fails else f"{len(fails)} checks failed")
sys.exit(1 if fails else 0)
PY
