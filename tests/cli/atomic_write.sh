#!/usr/bin/env bash
# atomic_write.sh BIN_DIR WORK_DIR MODEL_F32 — `lio quantize` killed at ten moments of its run,
# the last half of them inside its write: the output is then absent, or its old contents whole,
# or the whole new file (byte for byte a complete run's); never a half file (issue 43, item 4;
# lio/atomic_file.h). SKIP (77) without the F32 copy setup.sh makes.
set -uo pipefail
bin="$1" work="$2" model="$3"
[[ -f "$model" ]] || { echo "SKIP: no $model (scripts/setup.sh makes it)"; exit 77; }
rm -rf "$work"; mkdir -p "$work"
q=("$bin/lio" quantize --model "$model" --asymmetric)
t0=$(date +%s%N)
"${q[@]}" --out "$work/reference.gguf" 2>/dev/null >/dev/null || { echo "FAIL: a full lio quantize run failed"; exit 1; }
run_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "a full run: ${run_ms} ms"
fails=0
for pct in 30 45 60 70 78 84 88 92 95 98; do
  for old in none old; do
    out="$work/out_${pct}_${old}.gguf"
    [[ $old == old ]] && printf 'old contents' >"$out"
    "${q[@]}" --out "$out" >/dev/null 2>&1 &
    pid=$!
    sleep "$(awk -v ms="$run_ms" -v p="$pct" 'BEGIN { printf "%.3f", ms * p / 100000 }')"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    if [[ ! -e "$out" ]]; then
      state="absent"; [[ $old == old ]] && { state="old file lost"; fails=$((fails + 1)); }
    elif cmp -s "$out" "$work/reference.gguf"; then
      state="whole new file"
    elif [[ $old == old && "$(cat "$out")" == "old contents" ]]; then
      state="old contents whole"
    else
      state="HALF FILE ($(stat -c %s "$out") bytes)"; fails=$((fails + 1))
    fi
    echo "killed at ${pct}% (target ${old}): ${state}"
  done
done
# A killed writer leaves its temporary (named after the target and its pid), never the target.
echo "temporaries left by the kills: $(ls "$work" | grep -c '\.tmp-' || true)"
if ((fails)); then echo "FAIL: $fails kill(s) left a half or lost file"; exit 1; fi
echo "ok   atomic_write"
