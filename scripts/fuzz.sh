#!/usr/bin/env bash
# fuzz.sh — coverage-guided fuzzing of LIO's readers of untrusted bytes (tests/fuzz; libFuzzer,
# ASan + UBSan, Clang).
#
#   scripts/fuzz.sh [--minutes N] [--merge] [TARGET ...]
#       builds the fuzz targets (build preset fuzz, in build-asan/), then runs each target (all by default: gguf,
#       safetensors, tokenizer_json, tokenize, chat_template, openai_request, batch_jsonl,
#       request_trace) for N minutes (default 1) from its committed seeds, one after another,
#       and prints a table: executions, executions/s, coverage (edges; features), corpus size,
#       findings. New inputs collect under build-asan/fuzz/corpus/TARGET; --merge then adds
#       the ones that reach new coverage to tests/fuzz/corpus/TARGET (libFuzzer -merge=1), to
#       be committed. A finding leaves its input in build-asan/fuzz/artifacts/ and the script
#       exits 1: reproduce with `build-asan/bin/fuzz_TARGET FILE`, fix, and commit the input
#       to the target's corpus as a regression seed.
#   scripts/fuzz.sh ... --results bench/results/fuzz_cpu
#       also writes the table, with command, commit, machine and date, as that .json / .md
#       (bench/fuzz/report.py).
#   scripts/fuzz.sh --run-one BINARY SEEDS DICT SECONDS WORKDIR [SEED]
#       one bounded run (what `ctest --preset fuzz` runs per target, label fuzz, with SEED 1).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$root/bench${PYTHONPATH:+:$PYTHONPATH}"  # the benchmark toolkit, liobench, for any python3

# One bounded run of one target. Prints libFuzzer's final stats line and a one-line summary;
# exit status 0 only when the run ended by time with no finding.
run_one() {
  local bin="$1" seeds="$2" dict="$3" seconds="$4" work="$5" seed="${6:-0}"
  local name
  name="$(basename "$bin")"
  name="${name#fuzz_}"
  mkdir -p "$work/corpus/$name" "$work/artifacts"
  # seed 0: libFuzzer picks one (a developer's run); ctest passes 1, so CI mutates the same way
  # each time and a finding there reproduces.
  local args=(-seed="$seed" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024
              -print_final_stats=1 -artifact_prefix="$work/artifacts/$name-")
  [[ -n "$dict" ]] && args+=(-dict="$dict")
  local log="$work/$name.log" rc=0
  # Leaks are findings too (ASan's leak check runs at exit and on each input's end).
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
    "$bin" "${args[@]}" "$work/corpus/$name" "$seeds" >"$log" 2>&1 || rc=$?
  local runs cov ft corp
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || echo 0)
  ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || echo 0)
  corp=$(grep -oE 'corp: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || echo 0)
  local seeds_n
  seeds_n=$(find "$seeds" -type f | wc -l)
  printf '{"target": "%s", "seconds": %s, "seeds": %s, "runs": %s, "edges": %s, "features": %s, "corpus": %s, "exit": %s}\n' \
    "$name" "$seconds" "$seeds_n" "$runs" "$cov" "$ft" "$corp" "$rc" >"$work/$name.summary.json"
  printf '%-16s runs %-10s exec/s %-7s cov %-6s ft %-6s corpus %-5s %s\n' "$name" "$runs" \
    "$(( runs / (seconds > 0 ? seconds : 1) ))" "$cov" "$ft" "$corp" "$([[ $rc == 0 ]] && echo ok || echo FINDING)"
  if ((rc != 0)); then
    echo "--- $name: libFuzzer exited $rc; the end of its log ($log):"
    tail -40 "$log"
    ls "$work/artifacts" | sed "s|^|    input: $work/artifacts/|" | grep "$name-" || true
    return 1
  fi
}

if [[ "${1:-}" == "--run-one" ]]; then
  shift
  run_one "$@"
  exit $?
fi

minutes=1
merge=0
results=""
targets=()
while (($#)); do
  case "$1" in
    --minutes) minutes="$2"; shift 2 ;;
    --merge) merge=1; shift ;;
    --results) results="$2"; shift 2 ;;
    -h|--help) sed -n '2,23p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "fuzz.sh: unknown flag $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=(gguf safetensors tokenizer_json tokenize chat_template openai_request batch_jsonl request_trace)
declare -A dicts=([gguf]=gguf.dict [safetensors]=json.dict [tokenizer_json]=json.dict [openai_request]=openai.dict
                  [batch_jsonl]=openai.dict [request_trace]=json.dict)

cd "$root"
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (scripts/setup.sh installs clang)" >&2; exit 2; }
cmake --preset asan >/dev/null
cmake --build --preset fuzz -j "$(nproc)"
work="$root/build-asan/fuzz"
seconds=$(( minutes * 60 ))
failed=0
for t in "${targets[@]}"; do
  bin="$root/build-asan/bin/fuzz_$t"
  [[ -x "$bin" ]] || { echo "fuzz.sh: no target '$t'" >&2; exit 2; }
  dict=""
  [[ -n "${dicts[$t]:-}" ]] && dict="$root/tests/fuzz/dict/${dicts[$t]}"
  run_one "$bin" "$root/tests/fuzz/corpus/$t" "$dict" "$seconds" "$work" || failed=1
  if ((merge)); then
    "$bin" -merge=1 "$root/tests/fuzz/corpus/$t" "$work/corpus/$t" >/dev/null 2>&1
    echo "    merged: tests/fuzz/corpus/$t holds $(ls "$root/tests/fuzz/corpus/$t" | wc -l) inputs"
  fi
done
if [[ -n "$results" ]]; then
  py="$root/.venv/bin/python"
  [[ -x "$py" ]] || py=python3
  cmd="scripts/fuzz.sh --minutes $minutes"
  ((merge)) && cmd+=" --merge"
  cmd+=" --results $results ${targets[*]}"
  "$py" "$root/bench/fuzz/report.py" --work "$work" --out "$results" --targets "${targets[@]}" --command "$cmd"
fi
exit $failed
