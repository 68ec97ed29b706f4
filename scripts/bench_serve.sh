#!/usr/bin/env bash
# bench_serve.sh — chapter 09's serving benchmark: lio-server against llama.cpp's llama-server
# on the same GGUF and machine, in one run (bench/serve/bench_serve.cpp, like `vllm bench
# serve`). Both servers get the same number of parallel sequences (lio --max-num-seqs, llama
# --parallel with continuous batching) and every core. Peer rule (COURSE.md, "Performance
# method"): at each rate, --repeats times (default 5), one bench_serve run sends the same requests
# to lio then llama, so the servers alternate A B A B and drift hits both; every run gets new
# prompts (no prompt cache carries over). bench/serve/aggregate.py then reports, per metric, the
# median and min-max over the repeats for each server and the median and min-max of the
# per-repeat ratios lio / llama, with "tie" where that range holds 1. Writes
# bench/results/<name>.md (the tables, with machine and settings) and .json (medians where a
# single run's numbers were, spreads beside them, every run under repeat_runs), and the plot
# (bench/serve/plot.py) when the venv has matplotlib.
#
# Usage: scripts/bench_serve.sh [--quick] [--repeats N] [--no-llama] [--device cpu|cuda] [--name NAME]
#   --quick      16 prompts, 32 output tokens, rates 4 and inf, 2 repeats unless --repeats says
#                otherwise (a smoke run, ~8 min; below the rule's 5 repeats, and its .md says so)
#   --repeats    runs per rate, each lio then llama (default 5, the rule's minimum)
#   --no-llama   lio-server alone (e.g. on a GPU: llama-server here is a CPU build)
#   --device     lio-server's --device (default cpu)
#   --name       result file stem (default 09_serve_cpu, or 09_serve_<gpu> with --device cuda)
# Env (defaults): BUILD_DIR (build), LIO_SERVER and BENCH_SERVE (BUILD_DIR/bin/...),
#   LLAMA_BUILD_DIR (build-llama), MODEL (the default model),
#   SLOTS (32), NUM_PROMPTS (64), INPUT_LEN (256), OUTPUT_LEN (128), RATES (1,2,4,inf),
#   LIO_ARGS (more lio-server flags, e.g. "--activations int8 --kv-cache-dtype f16": llama-server
#   rounds activations to 8 bits for quantized weights and keeps an f16 KV cache by default),
#   MAX_CONCURRENCY (= SLOTS), SLO_TTFT_MS (3000), SLO_TPOT_MS (200), SEED (0).
# Needs: BUILD_DIR/bin/lio-server and bench_serve (cmake --build build); llama-server is built
# once by scripts/build_llama_server.sh when missing (long on 2 cores).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$root/bench${PYTHONPATH:+:$PYTHONPATH}"  # the benchmark toolkit, liobench, for any python3
cd "$root"

quick=0 llama=1 device=cpu name="" repeats=""
while (($#)); do
  case "$1" in
    --quick) quick=1 ;;
    --repeats) repeats="$2"; shift ;;
    --no-llama) llama=0 ;;
    --device) device="$2"; shift ;;
    --name) name="$2"; shift ;;
    *) echo "bench_serve.sh: unknown flag $1" >&2; exit 2 ;;
  esac
  shift
done

# Paths relative to the repository root (we cd there), so that the results record no local path.
build="${BUILD_DIR:-build}" && build="${build#"$root"/}"
llama_build="${LLAMA_BUILD_DIR:-build-llama}" && llama_build="${llama_build#"$root"/}"
model="${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}" && model="${model#"$root"/}"
slots="${SLOTS:-32}"
num_prompts="${NUM_PROMPTS:-64}" input_len="${INPUT_LEN:-256}" output_len="${OUTPUT_LEN:-128}"
rates="${RATES:-1,2,4,inf}"
if ((quick)); then num_prompts=16 output_len=32 rates=4,inf; fi
[[ -n "$repeats" ]] || { if ((quick)); then repeats=2; else repeats=5; fi; }
[[ "$repeats" =~ ^[1-9][0-9]*$ ]] || { echo "bench_serve.sh: --repeats wants a positive integer, got $repeats" >&2; exit 2; }
if ((repeats < 5)); then
  echo "bench_serve.sh: $repeats repeats: COURSE.md asks for at least 5 to call a ratio; this run is below the rule" >&2
fi
max_conc="${MAX_CONCURRENCY:-$slots}"
if [[ -z "$name" ]]; then
  name=09_serve_cpu
  if [[ "$device" == cuda ]] && command -v nvidia-smi >/dev/null; then
    gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oE '[A-Z][0-9]{2,4}' | head -n1 |
      tr 'A-Z' 'a-z' || true)"  # "NVIDIA H100 80GB HBM3" -> h100
    name="09_serve_${gpu:-cuda}"
  fi
fi

lio_server="${LIO_SERVER:-$build/bin/lio-server}"
bench_serve="${BENCH_SERVE:-$build/bin/bench_serve}"
for bin in "$lio_server" "$bench_serve"; do
  [[ -x "$bin" ]] || { echo "bench_serve.sh: no $bin (cmake --build $build)" >&2; exit 1; }
done
[[ -f "$model" ]] || { echo "bench_serve.sh: no model at $model (scripts/fetch_model.sh)" >&2; exit 1; }
if ((llama)) && [[ ! -x "$llama_build/bin/llama-server" ]]; then
  LLAMA_BUILD_DIR="$llama_build" bash scripts/build_llama_server.sh
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pids=()
cleanup() {  # SIGTERM, then SIGKILL whatever still runs 10 s later (a busy llama-server drains first)
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for _ in $(seq 50); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.2
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
wait_up() {  # wait_up NAME URL LOG PID
  for _ in $(seq 1 600); do
    if curl -sf "$2/health" >/dev/null 2>&1; then return 0; fi
    kill -0 "$4" 2>/dev/null || { echo "bench_serve.sh: $1 exited at start-up:" >&2; tail -n 20 "$3" >&2; exit 1; }
    sleep 0.2
  done
  echo "bench_serve.sh: $1 did not come up" >&2; exit 1
}

logs="$build/bench_serve_logs"
mkdir -p "$logs" bench/results
# A context per sequence that holds the longest request (1.5 x each mean length, the dataset's
# range ratio 0.5), rounded up to 256: llama-server splits -c among its --parallel slots.
per_seq=$(( ( (input_len * 3 / 2 + output_len * 3 / 2 + 64) + 255) / 256 * 256 ))

lio_port="$(free_port)"
read -ra lio_args <<<"${LIO_ARGS:-}"
"$lio_server" --model "$model" --port "$lio_port" --max-num-seqs "$slots" --device "$device" \
  --slo-ttft-ms "${SLO_TTFT_MS:-3000}" --slo-tpot-ms "${SLO_TPOT_MS:-200}" "${lio_args[@]}" >"$logs/lio-server.log" 2>&1 &
pids+=($!)
wait_up lio-server "http://127.0.0.1:$lio_port" "$logs/lio-server.log" "${pids[-1]}"
targets=(--target "lio=http://127.0.0.1:$lio_port")
if ((llama)); then
  llama_port="$(free_port)"
  "$llama_build/bin/llama-server" -m "$model" --port "$llama_port" --host 127.0.0.1 --parallel "$slots" \
    --cont-batching -c $((slots * per_seq)) --threads "$(nproc)" >"$logs/llama-server.log" 2>&1 &
  pids+=($!)
  wait_up llama-server "http://127.0.0.1:$llama_port" "$logs/llama-server.log" "${pids[-1]}"
  targets+=(--target "llama=http://127.0.0.1:$llama_port")
fi

out="bench/results/$name"
flags="" servers="lio-server --max-num-seqs $slots --device $device${LIO_ARGS:+ $LIO_ARGS}"
((quick)) && flags=" --quick"
flags="$flags --repeats $repeats"
((llama)) || flags="$flags --no-llama"
flags="$flags --device $device"
if ((llama)); then
  servers="$servers; llama-server --parallel $slots --cont-batching -c $((slots * per_seq)) --threads $(nproc) (llama.cpp vendored in llama-cpp-python $(grep -E '^llama-cpp-python==' scripts/requirements.txt | cut -d= -f3), CPU build)"
fi

# The runs: at each rate, `repeats` bench_serve runs, each sending the same requests to lio then
# llama (A B A B). Seeds: SEED + rate index x repeats + repeat - 1, so no server sees a prompt
# twice (with --repeats 1 these are the old seeds, SEED + rate index).
runs_dir="$logs/runs_$name"
rm -rf "$runs_dir" && mkdir -p "$runs_dir"
IFS=, read -ra rate_list <<<"$rates"
run_files=()
for ri in "${!rate_list[@]}"; do
  for ((rep = 1; rep <= repeats; rep++)); do
    seed=$(( ${SEED:-0} + ri * repeats + rep - 1 ))
    run="$runs_dir/rate${ri}_rep${rep}"
    echo "bench_serve.sh: rate ${rate_list[ri]} req/s, repeat $rep/$repeats (seed $seed)" >&2
    "$bench_serve" "${targets[@]}" --tokenizer "$model" --num-prompts "$num_prompts" \
      --input-len "$input_len" --output-len "$output_len" --request-rates "${rate_list[ri]}" \
      --max-concurrency "$max_conc" --slo-ttft-ms "${SLO_TTFT_MS:-3000}" --slo-tpot-ms "${SLO_TPOT_MS:-200}" \
      --seed "$seed" --json "$run.json" >"$run.md" 2>"$run.log" ||
      { echo "bench_serve.sh: bench_serve failed:" >&2; tail -n 20 "$run.log" >&2; exit 1; }
    run_files+=("$run.json")
  done
done
{
  echo "# Chapter 09 serving benchmark: lio-server vs llama-server"
  echo
  echo "\`scripts/bench_serve.sh$flags\` on $(date -u +%Y-%m-%d); $servers."
  echo
  python3 bench/serve/aggregate.py --out "$out.json" --repeats "$repeats" \
    --command "scripts/bench_serve.sh$flags ($servers)" "${run_files[@]}"
} | tee "$out.md"
echo
echo "lio-server /metrics at the end:" && curl -s "http://127.0.0.1:$lio_port/metrics" | grep -E '^lio:(num_preemptions|request_success|prefix_cache|kv_cache_usage|.*goodput)' || true
if [[ -x .venv/bin/python ]]; then .venv/bin/python bench/serve/plot.py "$out.json" || true; fi
echo "wrote $out.md $out.json"
