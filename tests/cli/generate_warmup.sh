#!/usr/bin/env bash
# generate_warmup.sh BIN_DIR WORK_DIR MODEL — `lio generate --warmup N` on the real model (CPU,
# greedy, --ignore-eos): the timed run gives the same tokens and text as a run without warm-up,
# --json reports the warm-up runs (their times, each > 0) and 0 prefix-cache hits for the timed
# prompt, the text output names the warm-up on stderr, and a negative count is refused in one
# line. The prompt spans several 16-token KV blocks, so a warm-up that shared its blocks with the
# timed prompt through a prefix cache would show as hits. Skips (77) without the model or python3.
set -uo pipefail
bin="$1"
work="$2"
model="$3"
rm -rf "$work" && mkdir -p "$work"
if [[ ! -f "$model" ]]; then echo "SKIP: $model is absent"; exit 77; fi
if ! command -v python3 >/dev/null 2>&1; then echo "SKIP: python3 is needed to check the JSON"; exit 77; fi

prompt="The committee met on a cold morning to discuss the budget for the new library, and after a long debate they agreed to meet again."
run() {  # run NAME ARGS...: lio generate with the shared flags, stdout to $work/NAME.out
  local name="$1"
  shift
  if ! "$bin/lio" generate --model "$model" --device cpu --prompt "$prompt" --max-tokens 6 --ignore-eos \
      --temperature 0 --kv-cache-mib 64 "$@" >"$work/$name.out" 2>"$work/$name.err"; then
    echo "FAIL: lio generate $* exited non-zero"; cat "$work/$name.err"; exit 1
  fi
}
run cold --json
run warm --json --warmup 1
run warm_text --warmup 2

if "$bin/lio" generate --model "$model" --device cpu --prompt "$prompt" --warmup -1 >"$work/neg.out" 2>"$work/neg.err"; then
  echo "FAIL: --warmup -1 exited 0"; exit 1
fi
if [[ "$(grep -c . "$work/neg.err")" != 1 ]] || ! grep -qF -- "--warmup must be >= 0" "$work/neg.err"; then
  echo "FAIL: --warmup -1 wants a one-line error naming --warmup, got:"; cat "$work/neg.err"; exit 1
fi

python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
cold = json.load(open(f"{work}/cold.out"))
warm = json.load(open(f"{work}/warm.out"))
fails = []
def check(cond, what):
    if not cond:
        fails.append(what)
check(cold["n_generated_tokens"] == 6 and warm["n_generated_tokens"] == 6,
      f"want 6 tokens each (--ignore-eos), got {cold['n_generated_tokens']} and {warm['n_generated_tokens']}")
check(cold["text"] != "", "the cold run generated no text")
check(warm["token_ids"] == cold["token_ids"], f"tokens differ: {warm['token_ids']} vs {cold['token_ids']}")
check(warm["text"] == cold["text"], f"text differs: {warm['text']!r} vs {cold['text']!r}")
check(warm["n_prompt_tokens"] == cold["n_prompt_tokens"] and cold["n_prompt_tokens"] > 16,
      f"prompt tokens {warm['n_prompt_tokens']} / {cold['n_prompt_tokens']}, want equal and > 16 (one block)")
check(cold.get("warmup_runs") == 0 and cold.get("warmup_ms") == [], f"cold run reports warm-up: {cold.get('warmup_runs')}")
check(warm.get("warmup_runs") == 1, f"warmup_runs {warm.get('warmup_runs')}, want 1")
check(len(warm.get("warmup_ms", [])) == 1 and all(t > 0 for t in warm.get("warmup_ms", [])),
      f"warmup_ms {warm.get('warmup_ms')}, want one time > 0")
check(warm.get("prefix_cache_hits", 0) == 0, f"the timed prompt hit the prefix cache: {warm.get('prefix_cache_hits')}")
text = open(f"{work}/warm_text.out").read()
check(text.rstrip("\n") == cold["text"].rstrip("\n"), f"text mode printed {text!r}, want {cold['text']!r}")
err = open(f"{work}/warm_text.err").read()
check("2 untimed warm-up runs" in err, f"text mode's summary lacks the warm-up line: {err!r}")
for f in fails:
    print("FAIL:", f)
if not fails:
    print(f"ok: --warmup 1 and 2 keep the text {cold['text']!r}; warm-up {warm['warmup_ms'][0]:.1f} ms, "
          f"TTFT {cold['ttft_ms']:.1f} ms cold, {warm['ttft_ms']:.1f} ms warm")
sys.exit(1 if fails else 0)
PY
