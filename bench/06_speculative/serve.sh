#!/usr/bin/env bash
# serve.sh — chapter 06's serving check: lio-server with speculative decoding against the same
# server without it, at low load, where speculation is meant to pay (TPOT p50). Two lio-servers
# on the same model and settings, one with --spec-method; each bench_serve run (bench/serve,
# like `vllm bench serve`) sends the same requests to one server then the other, so the two
# alternate A B A B; --repeats runs with new prompts each, median and min-max of every metric and
# of the per-run ratios (COURSE.md, "Performance method").
#
# Usage: bench/06_speculative/serve.sh [--repeats 3] [--spec "ngram --num-speculative-tokens 4"]
# Env (defaults): BUILD_DIR (build), MODEL (the default model), NUM_PROMPTS (16), INPUT_LEN (256),
#   OUTPUT_LEN (64), RATE (1), SLOTS (8), SEED (100).
# Writes bench/results/06_speculative_serve_cpu.{json,md}.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
export PYTHONPATH="$root/bench${PYTHONPATH:+:$PYTHONPATH}"  # the benchmark toolkit, liobench, for any python3
cd "$root"
repeats=3
spec="ngram --num-speculative-tokens 4"
while (($#)); do
  case "$1" in
    --repeats) repeats="$2"; shift ;;
    --spec) spec="$2"; shift ;;
    *) echo "serve.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done
build="${BUILD_DIR:-build}"
model="${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}"
slots="${SLOTS:-8}"
logs="$build/bench_logs/06_serve"
rm -rf "$logs" && mkdir -p "$logs"
export OMP_WAIT_POLICY=passive  # the idle server's threads sleep while the other one runs

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
port_plain=18601 port_spec=18602
"$build/bin/lio-server" --model "$model" --port "$port_plain" --max-num-seqs "$slots" >"$logs/plain.log" 2>&1 &
pids+=($!)
# shellcheck disable=SC2086
"$build/bin/lio-server" --model "$model" --port "$port_spec" --max-num-seqs "$slots" --spec-method $spec \
  >"$logs/spec.log" 2>&1 &
pids+=($!)
for port in "$port_plain" "$port_spec"; do
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 0.5
  done
  curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "serve.sh: a server did not start:" >&2; tail "$logs"/*.log >&2; exit 1; }
done

runs=()
for ((rep = 1; rep <= repeats; rep++)); do
  run="$logs/run$rep.json"
  echo "serve.sh: repeat $rep/$repeats" >&2
  "$build/bin/bench_serve" --target "spec=http://127.0.0.1:$port_spec" --target "plain=http://127.0.0.1:$port_plain" \
    --tokenizer "$model" --num-prompts "${NUM_PROMPTS:-16}" --input-len "${INPUT_LEN:-256}" \
    --output-len "${OUTPUT_LEN:-64}" --request-rates "${RATE:-1}" --seed $(( ${SEED:-100} + rep )) \
    --json "$run" >"$logs/run$rep.md" 2>"$logs/run$rep.log"
  runs+=("$run")
done
spec_metrics="$(curl -s "http://127.0.0.1:$port_spec/metrics" | grep -E '^lio:spec_decode' || true)"
python3 bench/06_speculative/serve_aggregate.py --spec "$spec" --model "$model" --slots "$slots" \
  --metrics "$spec_metrics" --out bench/results/06_speculative_serve_cpu "${runs[@]}"
