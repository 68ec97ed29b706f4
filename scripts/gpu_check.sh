#!/usr/bin/env bash
# gpu_check.sh — the GPU check: everything LIO's CUDA path must prove, in ONE device call of at
# most 8 minutes, from binaries built elsewhere (scripts/gpu_bundle.sh). It never stops at the
# first failure: every selected step runs (each under its own timeout), and the report says what
# passed.
#
#   bash scripts/gpu_check.sh --from /tmp/lio-gpu [--out DIR] [--only ID,...] [--skip ID,...]
#   bash scripts/gpu_check.sh --dry-run --bin-dir build/bin      anywhere: what needs no GPU
#   bash scripts/gpu_check.sh --list-steps                       the step ids and their seconds
#
# --from DIR     holds lio-gpu.tar.xz (and model.partNN: reassembled and sha256-checked against the
#                bundle's MANIFEST.txt); --bin-dir DIR runs a build's binaries instead.
# --out DIR      where the report goes ($OUT on the device machine; default build/gpu_check):
#                cuda_<gpu>_validation.md and .json, gpu_check.log (every step's output, the last
#                60 lines of each) and gpu_check_logs.tar.gz (whole logs and gtest JSON).
# --dry-run      no GPU is used: the GPU steps are reported as skipped, everything else runs, and
#                the exit status is 0 when nothing that ran failed (CI's gpu_check_dry_run test).
# --budget-s N   wall-time budget (default 450): a step that would start past it is skipped.
# --only ID,...  runs these steps alone, so that a fix is rechecked in one short call; --skip ID,...
#                runs every step but these. ID: a step's id (memcheck:runner), its group (memcheck:
#                every memcheck step) or gtest:BINARY (one CUDA test binary, e.g. gtest:test_cuda_runner).
#                A step left out is reported as skipped, "not selected (--only/--skip)"; smi, libs and
#                model run whenever a selected step needs them. An unknown ID exits 2 and lists the
#                valid ones. The check ends with the failed steps' ids as a ready `--only` rerun.
# --list-steps   prints each step's id, its estimated seconds on an H200 (the last H200 run's, or
#                "est": estimated, never run) and what it runs, then exits; scripts/gpu_bundle.sh
#                renders the same table, with the device minutes of the calls, into CALLS.md.
#
# Steps: GPU, driver and commit; shared libraries resolved (cuBLAS and NCCL from the image: the
# CUDA toolkit or PyTorch's nvidia-* wheels); the model; the host-side CUDA helpers; every CUDA
# gtest binary (JSON results; on the real model too: CUDA vs CPU logits for the f32 / f16 / int8 KV
# cache, int8 activations, each attention kernel and --dtype f32 / f16 / bf16); compute-sanitizer
# memcheck on the flash, paged + kv_append, MLA, fused decode and wide GEMV kernels and on the runner
# (every op, CUDA graphs, fused kernels); the CUDA exercises' grading tests (chNN_task_K_cuda_*: on the
# reference solution they pass, on the stubs every case fails; memcheck and racecheck on the
# reference); the real model's logits again on re-quantized files (Q8_0, Q4_0, Q3_1); `lio generate` greedy text on CPU and CUDA with flash, naive and paged attention,
# flash and paged with --cuda-graphs, with --fused-kernels (and the f16 KV cache, int8 activations:
# reported); the bf16 matmul ceiling (PyTorch); bench_cuda_decode (flash vs paged, eager vs CUDA
# graph, launches per token, GB/s against the copy bandwidth); ch07_flash_attention kernels --device
# cuda (TFLOP/s against the ceiling); bench_cuda_gemv (each decode matmul kernel alone, fused and
# unfused: GB/s against the copy rate); when the bundle carries llama.cpp's CUDA build, the peer on
# the same card (bench/cuda_decode/peer.py, bench/batched/run.py --device cuda), each writing its own
# results files into --out; their command lines are parsed (--check-args) in every run, the dry run too.
# Exit status: 0 when every step that ran passed; 1 when one failed; 2 for bad arguments; 3 when no
# GPU answered without --dry-run (the report is written in every case). LIO_GPU_CHECK_ASSUME_GPU=1
# runs the GPU steps without a GPU, to test this script's own paths there (they fail, and the report
# says so).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$root/bench${PYTHONPATH:+:$PYTHONPATH}"  # the benchmark toolkit, liobench, for any python3
cd "$root"

# ---- the steps: id, estimated seconds on an H200, where that number comes from, what the step runs --
# Sources: "h200" is the step's seconds in bench/results/cuda_h200_validation.json (commit d22af36,
# the last run on a GPU; whole seconds, so 0 is under one); "h200+" is that plus an estimate for what
# the step gained since; "est" is estimated, never run. The estimates live here alone: --list-steps
# prints them and scripts/gpu_bundle.sh plans the device calls from them.
readonly step_table='
smi                    0 h200  nvidia-smi: the GPU and its driver
libs                   1 h200  shared libraries resolved (cuBLAS and NCCL from the image)
model                  0 h200  the model reassembled from its parts, sha256 against the manifest
gtest                 30 h200+ every CUDA gtest binary (19 s at d22af36, before the graph, fused and wide GEMV tests); gtest:BINARY runs one
memcheck:flash         1 h200  compute-sanitizer memcheck: flash + naive attention
memcheck:paged         1 h200  memcheck: paged attention + kv_append
memcheck:mla           1 h200  memcheck: MLA
memcheck:fused        15 est   memcheck: fused decode kernels + wide Q4_1 GEMV (test_cuda_ops)
memcheck:runner       30 h200+ memcheck: the runner on tiny models (1 s at d22af36, before the CUDA graph, fused kernel and engine-with-graphs tests)
memcheck:grade_cuda   30 est   memcheck: the reference kernel of every CUDA grading test (chapter 03 Task 7, 04 and 07 Task 6: chNN_task_K_cuda_*)
grade_cuda            60 est   CUDA grading tests (chNN_task_K_cuda_*): the reference passes, the stub fails every case; racecheck on the reference
requant:q8_0           6 h200  the model re-quantized to Q8_0: CUDA vs CPU logits
requant:q4_0           5 h200  the model re-quantized to Q4_0: CUDA vs CPU logits
requant:q3_1           6 h200  the model re-quantized to Q3_1: CUDA vs CPU logits
greedy:flash           2 h200  greedy text CPU == CUDA: flash attention
greedy:naive           1 h200  greedy text CPU == CUDA: naive attention
greedy:paged           2 h200  greedy text CPU == CUDA: paged attention
greedy:flash_graphs    3 est   greedy text CPU == CUDA: flash, --cuda-graphs
greedy:paged_graphs    3 est   greedy text CPU == CUDA: paged, --cuda-graphs
greedy:fused           3 est   greedy text CPU == CUDA: flash, --cuda-graphs --fused-kernels
greedy:f16_kv          2 h200  greedy text CPU == CUDA: f16 KV cache (reported, not required)
greedy:int8_act        2 h200  greedy text CPU == CUDA: int8 activations (reported, not required)
ceiling                7 h200  the bf16 matmul ceiling (PyTorch)
bench_decode          20 h200+ bench_cuda_decode (14 s at d22af36, before its 3 CUDA graph rows)
ch07                   2 h200  ch07_flash_attention kernels --device cuda
bench_gemv            10 est   bench_cuda_gemv: each decode matmul kernel alone
peer_decode           60 est   peer.py: batch-1 decode and prefill vs llama-bench, 5 rounds (needs llama-cuda.tar.xz)
peer_batched         150 est   batched/run.py: lio batch vs llama-batched-bench at C 1-64, 5 repeats (needs llama-cuda.tar.xz)
'
# What a plan short of device time leaves out first (scripts/gpu_bundle.sh): benchmarks that prove
# no correctness, the longest first.
readonly skip_first="peer_batched peer_decode bench_gemv"
readonly overhead_s=15  # unpacking the bundle, the report and its logs (estimated)
readonly not_selected="not selected (--only/--skip)"
declare -a step_ids=()
declare -A step_est=() step_src=() step_what=()
while read -r id est src what; do
  [[ -n "$id" ]] || continue
  step_ids+=("$id")
  step_est[$id]=$est
  step_src[$id]=$src
  step_what[$id]=$what
done <<<"$step_table"

list_steps() {
  local id total=0
  printf '%-20s %5s %-6s  %s\n' "# id" est_s source "step   (h200: seconds in the last H200 run; h200+: that plus an estimate; est: estimated, never run)"
  for id in "${step_ids[@]}"; do
    printf '%-20s %5d %-6s  %s\n' "$id" "${step_est[$id]}" "${step_src[$id]}" "${step_what[$id]}"
    total=$((total + step_est[$id]))
  done
  echo "# total $total s of steps; unpack + report $overhead_s s (estimated)"
  echo "# skip first when short of time: $skip_first"
}

# matches ID LIST: whether the comma-separated LIST names ID or its group (the part before ':').
matches() {
  local id="$1" s
  local -a names
  IFS=, read -r -a names <<<"$2"
  for s in "${names[@]}"; do
    [[ "$s" == "$id" || "$s" == "${id%%:*}" ]] && return 0
  done
  return 1
}
# valid_selector S: a step id, a group, or gtest:BINARY (the binary is checked once they are listed).
valid_selector() {
  local id
  [[ "$1" =~ ^gtest:test_cuda_[A-Za-z0-9_]+$ ]] && return 0
  for id in "${step_ids[@]}"; do
    [[ "$1" == "$id" || "$1" == "${id%%:*}" ]] && return 0
  done
  return 1
}

from=""
bin_dir=""
out="${OUT:-}"
dry=0
budget_s=450
only=""
skip_ids=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --from) from="$2"; shift ;;
    --bin-dir) bin_dir="$2"; shift ;;
    --out) out="$2"; shift ;;
    --dry-run) dry=1 ;;
    --budget-s) budget_s="$2"; shift ;;
    --only) only="${2:-}"; [[ -n "$only" ]] || { echo "gpu_check.sh: --only wants step ids (--list-steps)" >&2; exit 2; }; shift ;;
    --skip) skip_ids="${2:-}"; [[ -n "$skip_ids" ]] || { echo "gpu_check.sh: --skip wants step ids (--list-steps)" >&2; exit 2; }; shift ;;
    --list-steps) list_steps; exit 0 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {print}' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_check.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
IFS=, read -r -a selectors <<<"$only,$skip_ids"
bad=()
for s in "${selectors[@]}"; do
  [[ -z "$s" ]] || valid_selector "$s" || bad+=("$s")
done
if ((${#bad[@]})); then
  groups=$(printf '%s\n' "${step_ids[@]}" | sed -n 's/:.*//p' | sort -u | tr '\n' ' ')
  echo "gpu_check.sh: unknown step id(s): ${bad[*]}" >&2
  echo "valid ids: ${step_ids[*]}; groups: ${groups}gtest; one test binary: gtest:BINARY (--list-steps)" >&2
  exit 2
fi
# The command line the report records: what was selected, never this machine's paths.
command_line="bash scripts/gpu_check.sh$([[ -n "$from" ]] && echo " --from <dir>")$( ((dry)) && echo " --dry-run")"
command_line+="${only:+ --only $only}${skip_ids:+ --skip $skip_ids}"
((budget_s == 450)) || command_line+=" --budget-s $budget_s"

[[ -n "$out" ]] || out=build/gpu_check
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d /tmp/lio-gpu-check.XXXXXX)"
trap 'rm -rf "$work"' EXIT  # the logs leave in $out/gpu_check_logs.tar.gz
mkdir -p "$work/logs" "$work/gtest"
steps="$work/steps.jsonl"
: >"$work/steps.tsv"
main_log="$out/gpu_check.log"
exec > >(tee "$main_log") 2>&1
t_start=$SECONDS
python=$(command -v python3 || command -v python)

say() { echo "[gpu_check $(date -u +%T) +$((SECONDS - t_start))s] $*"; }

# record ID NAME STATUS SECONDS DETAIL [LOG]: one step's line in steps.tsv (steps.jsonl at the end:
# one Python for all the steps, not one a step).
record() {
  local detail="${5//[$'\t\n']/ }"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$detail" "${6:-}" >>"$work/steps.tsv"
  say "$3: $2${5:+ ($5)}"
}

skip() { record "$1" "$2" skipped 0 "$3"; }  # ID NAME DETAIL

# selected ID: whether --only and --skip leave the step in.
selected() {
  if [[ -n "$only" ]] && ! matches "$1" "$only"; then return 1; fi
  if [[ -n "$skip_ids" ]] && matches "$1" "$skip_ids"; then return 1; fi
  return 0
}
# want ID NAME: selected, or reported as skipped (not selected) and false.
want() {
  selected "$1" && return 0
  skip "$1" "$2" "$not_selected"
  return 1
}

slug_of() { echo "${1//[^A-Za-z0-9_.-]/_}"; }  # a step name as a file name

# run ID NAME TIMEOUT_S CMD...: runs CMD under `timeout`, its output in logs/<NAME>.log and this log.
run() {
  local id="$1" name="$2" limit="$3"
  shift 3
  if ((SECONDS - t_start + 5 > budget_s)); then
    skip "$id" "$name" "time budget of $budget_s s spent"
    return 1
  fi
  local slug log t0 rc status detail=""
  slug=$(slug_of "$name")
  log="$work/logs/$slug.log"
  say "start: $name"
  t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  sed 's/^/    /' "$log" | tail -n 60
  if ((rc == 0)); then
    status=passed
  elif ((rc == 124 || rc == 137)); then
    status=failed
    detail="timed out after $limit s"
  else
    status=failed
    detail="exit status $rc"
  fi
  record "$id" "$name" "$status" $((SECONDS - t0)) "$detail" "logs/$slug.log"
  return $rc
}

# ---- the binaries ---------------------------------------------------------------------------------
manifest=""
if [[ -n "$bin_dir" ]]; then
  bin="$(cd "$bin_dir" && pwd)"
elif [[ -n "$from" && -f "$from/lio-gpu.tar.xz" ]]; then
  # tar -J needs the xz program; Python's tarfile reads xz itself, should the image lack it.
  tar -C "$work" -xJf "$from/lio-gpu.tar.xz" 2>/dev/null ||
    "$python" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$from/lio-gpu.tar.xz" "$work" ||
    { echo "gpu_check.sh: cannot unpack $from/lio-gpu.tar.xz" >&2; exit 2; }
  bin="$work/lio-gpu/bin"
  manifest="$work/lio-gpu/MANIFEST.txt"
else
  echo "gpu_check.sh: give --from DIR (holding lio-gpu.tar.xz from scripts/gpu_bundle.sh) or --bin-dir DIR" >&2
  exit 2
fi
mf() { [[ -n "$manifest" ]] && grep -m1 "^$1=" "$manifest" | cut -d= -f2-; }
commit="$(mf commit)"
[[ -n "$commit" ]] || commit="$(git rev-parse --short HEAD 2>/dev/null || echo "not recorded")"
export LIO_COMMIT="$commit"
export OMP_WAIT_POLICY=passive

# Every step id of this run (the gtest row becomes one id per binary), checked against gtest:BINARY
# selectors, and which setup steps the selected ones need.
mapfile -t tests < <(cd "$bin" && ls test_cuda_* 2>/dev/null)
run_ids=()
for id in "${step_ids[@]}"; do
  if [[ "$id" == gtest ]]; then
    for t in "${tests[@]}"; do run_ids+=("gtest:$t"); done
  else
    run_ids+=("$id")
  fi
done
for s in "${selectors[@]}"; do
  if [[ "$s" == gtest:* && ! " ${run_ids[*]} " =~ " $s " ]]; then
    echo "gpu_check.sh: $s: no such test binary in the bundle; the binaries: ${tests[*]}" >&2
    exit 2
  fi
done
need_smi=0 need_libs=0 need_model=0
for id in "${run_ids[@]}"; do
  selected "$id" || continue
  case "$id" in
    smi|libs|model) ;;
    ceiling) need_smi=1 ;;
    gtest:*|requant:*|greedy:*|bench_decode|bench_gemv|peer_*) need_smi=1 need_libs=1 need_model=1 ;;
    *) need_smi=1 need_libs=1 ;;
  esac
done
needed() {  # ID FLAG: a setup step runs when selected or when a selected step needs it
  (($2)) || selected "$1"
}

# ---- the GPU --------------------------------------------------------------------------------------
gpu=0
gpu_name="none"
driver="none"
if ((!dry)) && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  gpu=1
  gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
elif ((!dry)) && [[ "${LIO_GPU_CHECK_ASSUME_GPU:-0}" == 1 ]]; then  # tests this script's GPU path
  gpu=1
  gpu_name="assumed GPU (none present)"
fi
no_gpu="no GPU (dry run)"
say "commit $commit, GPU: $gpu_name (driver $driver), dry run: $dry, binaries: $bin${only:+, only: $only}${skip_ids:+, skipping: $skip_ids}"
if ! needed smi "$need_smi"; then
  skip smi "nvidia-smi" "$not_selected"
elif ((gpu)) && command -v nvidia-smi >/dev/null; then
  run smi "nvidia-smi" 30 nvidia-smi
else
  skip smi "nvidia-smi" "$no_gpu"
fi

# ---- shared libraries: the bundle's own, then the image's CUDA libraries where ldd misses them ---
lib_search() {  # directories that may hold CUDA libraries on this machine
  ls -d /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-*/lib64 /usr/local/cuda-*/lib \
    /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu 2>/dev/null
  "$python" -c 'import glob, site
for p in site.getsitepackages() + [site.getusersitepackages()]:
    for d in sorted(glob.glob(p + "/nvidia/*/lib")) + sorted(glob.glob(p + "/torch/lib")): print(d)' 2>/dev/null
}
# The binaries the check runs: the CUDA tests and scripts/gpu_bundle.sh's programs (a build's bin/
# holds many more, and ldd on each of them took most of a dry run's time).
mapfile -t checked_bins < <(ls "$bin"/test_cuda_* "$bin"/ch[0-9][0-9]_task_*_cuda_* 2>/dev/null
                            bash "$root/scripts/gpu_bundle.sh" --print-programs | sed "s#^#$bin/#" | while read -r b; do [[ -e "$b" ]] && echo "$b"; done)
resolve_libs() {
  local missing found extra="" lib d
  missing=$(for b in "${checked_bins[@]}"; do ldd "$b" 2>/dev/null; done | awk '/not found/ {print $1}' | sort -u)
  for lib in $missing libnccl.so.2; do  # NCCL is loaded at run time (dlopen): look for it too
    if [[ "$lib" == libnccl.so.2 ]] && ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then continue; fi
    found=""
    while read -r d; do
      if [[ -e "$d/$lib" ]]; then found="$d"; break; fi
    done < <(lib_search)
    if [[ -n "$found" ]]; then
      [[ ":$extra:" == *":$found:"* ]] || extra="${extra:+$extra:}$found"
      echo "$lib -> $found"
    else
      echo "$lib: not found on this machine"
    fi
  done
  [[ -n "$extra" ]] && export LD_LIBRARY_PATH="$extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  local still
  still=$(for b in "${checked_bins[@]}"; do ldd "$b" 2>/dev/null; done | grep -E 'not found' | sort -u)
  if [[ -n "$still" ]]; then
    echo "still missing:"
    echo "$still"
    return 1
  fi
}
if needed libs "$need_libs"; then
  t0=$SECONDS
  resolve_libs >"$work/logs/libraries.log" 2>&1
  rc=$?
  cat "$work/logs/libraries.log"
  if ((rc == 0)); then
    record libs "shared libraries" passed $((SECONDS - t0)) "$(grep -c -- '->' "$work/logs/libraries.log") resolved from the image" logs/libraries.log
  else
    record libs "shared libraries" failed $((SECONDS - t0)) "some library is missing" logs/libraries.log
  fi
else
  skip libs "shared libraries" "$not_selected"
fi

# ---- the model ------------------------------------------------------------------------------------
model=""
if ! needed model "$need_model"; then
  skip model "model" "$not_selected"
elif [[ -n "$from" ]] && compgen -G "$from/model.part*" >/dev/null; then
  t0=$SECONDS
  cat "$from"/model.part* >"$work/model.gguf"
  want_sha="$(mf model_sha256)"
  got="$(sha256sum "$work/model.gguf" | cut -d' ' -f1)"
  if [[ -n "$want_sha" && "$got" == "$want_sha" ]]; then
    model="$work/model.gguf"
    record model "model reassembled" passed $((SECONDS - t0)) "$(mf model), sha256 ${got:0:12}... as the manifest"
  else
    record model "model reassembled" failed $((SECONDS - t0)) "sha256 $got, manifest ${want_sha:-missing}"
  fi
elif [[ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]]; then
  model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  record model "model" passed 0 "models/SmolLM2-135M-Instruct.Q4_1.gguf (checkout)"
else
  skip model "model" "no model parts and no models/ file: the real-model steps skip"
fi
[[ -n "$model" ]] && export LIO_MODEL="$model"
# Why a step that needs the GPU, or the GPU and the model, is skipped.
gpu_reason() { ((gpu)) && echo "no model" || echo "$no_gpu"; }

# ---- gtest binaries: host helpers everywhere, every CUDA test (they skip their GPU cases without one)
((${#tests[@]})) || record gtest "CUDA test binaries" failed 0 "no test_cuda_* binary in $bin"
for t in "${tests[@]}"; do
  want "gtest:$t" "gtest $t" || continue
  limit=120
  [[ "$t" == test_cuda_runner ]] && limit=300
  run "gtest:$t" "gtest $t" "$limit" "$bin/$t" --gtest_output="json:$work/gtest/$t.json"
done

# ---- compute-sanitizer memcheck: the kernels that index through block tables, the fused and wide ----
# GEMV kernels, and the runner's every op, its CUDA graphs (compute-sanitizer follows graph launches)
# and fused decode kernels.
# Each pattern of a filter must match a test (a renamed test would leave memcheck nothing to run, and
# pass): checked with --gtest_list_tests, which needs no GPU, so the dry run checks it too.
sanitize() {  # ID NAME BINARY FILTER TIMEOUT_S
  local name="memcheck $2" pattern n_tests=0 n
  local -a dead=() patterns
  want "$1" "$name" || return 0
  IFS=: read -r -a patterns <<<"$4"
  for pattern in "${patterns[@]}"; do
    n=$("$bin/$3" --gtest_list_tests --gtest_filter="$pattern" 2>/dev/null | grep -c '^  ')
    ((n > 0)) || dead+=("$pattern")
    n_tests=$((n_tests + n))
  done
  if ((${#dead[@]})); then
    record "$1" "$name" failed 0 "no test in $3 matches ${dead[*]}"
    return
  fi
  if ((!gpu)); then skip "$1" "$name" "$no_gpu; its filter matches $n_tests tests"; return; fi
  if ! command -v compute-sanitizer >/dev/null; then skip "$1" "$name" "compute-sanitizer not on PATH"; return; fi
  run "$1" "$name" "$5" compute-sanitizer --tool memcheck --error-exitcode 1 --print-limit 20 \
    "$bin/$3" --gtest_filter="$4"
}
sanitize memcheck:flash "flash + naive attention" test_cuda_flash_attention \
  'FlashAttention.QueryTileEdges*:FlashAttention.MixedPrefill*:FlashAttention.NonCausal*:FlashAttention.Workspace*:NaiveAttention.*' 150
sanitize memcheck:paged "paged attention + kv_append" test_cuda_paged_attention \
  'CudaPagedAttention.MatchesHost*:CudaKvAppend.*:CudaPagedAttentionQuantized.*' 150
sanitize memcheck:mla "MLA" test_cuda_mla 'CudaMla.AttentionMatchesCpuAtSmallOddShapes:CudaMla.LatentAppend*:CudaMla.Rope*' 150
sanitize memcheck:fused "fused + wide GEMV" test_cuda_ops 'CudaFused.*:CudaGemv.Q4_1Wide*:CudaGemv.WideRows*' 150
sanitize memcheck:runner "runner (tiny models, every op)" test_cuda_runner \
  'CudaRunnerTest.MixedBatchMatchesCpu:CudaRunnerTest.HeadDim256*:CudaRunnerTest.Reserved*:CudaRunnerTest.Int8ActivationsRound*:CudaRunnerTest.SwapIn*:CudaRunnerTest.EngineSwapPreemptionMatchesCpu:CudaRunnerTest.DecodeGraphs*:CudaRunnerTest.FusedKernels*:CudaRunnerTest.EngineWithGraphs*' 300
# Every CUDA grading test's reference kernel, each case: ch04_task_6_cuda_paged_decode is named
# "memcheck chapter 04 Task 6 reference kernel" (tests/cli/gpu_check_dry_run.sh derives the same).
memcheck_grade_cuda() {
  local graded
  local -a all
  mapfile -t all < <(cd "$bin" && ls ch[0-9][0-9]_task_*_cuda_* 2>/dev/null | grep -v '_stub$')
  if ((${#all[@]} == 0)); then
    want memcheck:grade_cuda "memcheck CUDA grading tests" &&
      record memcheck:grade_cuda "memcheck CUDA grading tests" failed 0 "no chNN_task_K_cuda_* binary in $bin"
    return 0
  fi
  for graded in "${all[@]}"; do
    [[ $graded =~ ^ch([0-9][0-9])_task_([0-9]+)_cuda_ ]] &&
      sanitize memcheck:grade_cuda "chapter ${BASH_REMATCH[1]} Task ${BASH_REMATCH[2]} reference kernel" "$graded" '*' 150
  done
}
memcheck_grade_cuda

# ---- CUDA grading tests (issue 61): a learner's kernel is graded like a CPU task --------------------------
# chNN_task_K_cuda_<what> (tests/grade/CMakeLists.txt, lio_add_cuda_grade_test) runs the reference
# solution here and must pass; its twin chNN_task_K_cuda_<what>_stub runs the unsolved stub and must
# fail every case, with no crash (tests/grade/expect_stub_failure.sh, as the CPU stub check requires of
# the CPU tasks; that check cannot run these: without a GPU their cases skip). Then racecheck on the
# reference's smaller cases: shared-memory hazards between its barriers (compute-sanitizer).
declare -A racecheck_filter=(
  [ch03_task_7_cuda_q4_1_gemv]='Ch03Task7.RaggedRowsAndRowLengths:Ch03Task7.SingleBlockRows:Ch03Task7.BatchesOfTwoToEight'
  [ch04_task_6_cuda_paged_decode]='Ch04Task6.SmolLM2RaggedContexts:Ch04Task6.GroupsWiderThanOneBlock:Ch04Task6.ContextsOfOneToken'
  [ch07_task_6_cuda_flash_forward]='Ch07Task6.DecodeRowsOneQueryATile:Ch07Task6.ShortChunkOfSevenRows:Ch07Task6.HeadDim80AndRaggedTiles')
grade_cuda_tests() {
  local t stub filter n
  local -a graded
  want grade_cuda "CUDA grading tests" || return 0
  mapfile -t graded < <(cd "$bin" && ls ch[0-9][0-9]_task_*_cuda_* 2>/dev/null | grep -v '_stub$')
  if ((${#graded[@]} == 0)); then
    record grade_cuda "CUDA grading tests" failed 0 "no chNN_task_K_cuda_* binary in $bin"
    return
  fi
  for t in "${graded[@]}"; do
    stub="${t}_stub"
    filter="${racecheck_filter[$t]:-*}"
    n=$("$bin/$t" --gtest_list_tests --gtest_filter="$filter" 2>/dev/null | grep -c '^  ')
    if [[ ! -x "$bin/$stub" ]]; then
      record grade_cuda "grade $t on the stubs" failed 0 "$stub is not in the bundle"
      continue
    elif ((n == 0)); then
      record grade_cuda "racecheck $t" failed 0 "no test in $t matches $filter"
      continue
    elif ((!gpu)); then
      skip grade_cuda "grade $t: the reference passes, the stub fails every case" "$no_gpu"
      continue
    fi
    if run grade_cuda "grade $t on the reference solution (must pass)" 120 "$bin/$t" \
      --gtest_output="json:$work/gtest/$t.json" &&
      grep -q '"result": "SKIPPED"' "$work/gtest/$t.json" 2>/dev/null; then
      record grade_cuda "grade $t: every case ran" failed 0 "cases skipped on a GPU machine: the test saw no device"
    fi
    GTEST_OUTPUT="json:$work/logs/$stub.json" run grade_cuda "grade $t on the stubs (must fail every case)" 120 \
      bash "$root/tests/grade/expect_stub_failure.sh" "$bin/$stub"
    if command -v compute-sanitizer >/dev/null; then
      run grade_cuda "racecheck $t ($n cases)" 180 compute-sanitizer --tool racecheck --error-exitcode 1 \
        --print-limit 20 "$bin/$t" --gtest_filter="$filter"
    else
      skip grade_cuda "racecheck $t" "compute-sanitizer not on PATH"
    fi
  done
}
grade_cuda_tests

# ---- the real model on re-quantized files: more weight readers against the CPU ----------------------
for spec in "q8_0:--bits 8" "q4_0:--bits 4" "q3_1:--bits 3 --asymmetric"; do
  name="${spec%%:*}"
  id="requant:$name"
  check="real model $name: CUDA vs CPU logits"
  want "$id" "$check" || continue
  if ! ((gpu)) || [[ -z "$model" ]]; then
    skip "$id" "$check" "$(gpu_reason)"
    continue
  fi
  read -r -a qargs <<<"${spec#*:}"
  q="$work/model.$name.gguf"
  if run "$id" "quantize $name" 120 "$bin/lio" quantize --model "$model" --out "$q" "${qargs[@]}"; then
    LIO_MODEL="$q" run "$id" "$check" 180 "$bin/test_cuda_runner" \
      --gtest_filter='CudaRunnerTest.RealModelEveryConfigMatchesCpu' --gtest_output="json:$work/gtest/real_model_$name.json"
  fi
done

# ---- greedy text: CPU and CUDA must write the same words ----------------------------------------------
greedy() {  # KEY NAME REQUIRED EXTRA_FLAGS...
  local id="greedy:$1" name="$2" required="$3"
  shift 3
  local check="greedy text $name: CPU == CUDA"
  want "$id" "$check" || return 0
  if ! ((gpu)) || [[ -z "$model" ]]; then
    skip "$id" "$check" "$(gpu_reason)"
    return 0
  fi
  local prompt="The capital of France is" device
  for device in cpu cuda; do
    run "$id" "generate $name ($device)" 120 "$bin/lio" generate --model "$model" --prompt "$prompt" --max-tokens 48 \
      --temperature 0 --json --device "$device" "$@"
    # The run's log is named after the step (run's slug), whatever punctuation the name holds.
    cp "$work/logs/$(slug_of "generate $name ($device)").log" "$work/greedy_${id#*:}_$device.json" 2>/dev/null
  done
  local result="$work/logs/greedy_${id#*:}.txt"
  "$python" - "$work/greedy_${id#*:}_cpu.json" "$work/greedy_${id#*:}_cuda.json" "$name" "$required" >"$result" <<'PY'
import json, sys
def text(path):
    """The text and token ids of `lio generate --json`'s (pretty-printed) object in the log."""
    try:
        log = open(path, errors="replace").read()
    except OSError:
        return None, None
    start = log.find("{")
    while start >= 0:
        try:
            d = json.JSONDecoder().raw_decode(log[start:])[0]
            if isinstance(d, dict) and "text" in d:
                return d["text"], d.get("token_ids")
        except ValueError:
            pass
        start = log.find("{", start + 1)
    return None, None
a, at = text(sys.argv[1])
b, bt = text(sys.argv[2])
print(json.dumps({"variant": sys.argv[3], "required": sys.argv[4] == "1", "cpu": a, "cuda": b,
                  "same_text": a is not None and a == b, "same_tokens": at is not None and at == bt}))
PY
  local same
  same=$("$python" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(int(d["same_text"]))' "$result" 2>/dev/null || echo 0)
  if ((same)); then
    record "$id" "$check" passed 0 "" "logs/${result##*/}"
  elif ((required)); then
    record "$id" "$check" failed 0 "the texts differ" "logs/${result##*/}"
  else
    record "$id" "$check" passed 0 "texts differ (an int8 / f16 rounding may flip a token; reported, not required)" "logs/${result##*/}"
  fi
}
greedy flash "flash" 1 --attention-backend flash
greedy naive "naive" 1 --attention-backend naive
greedy paged "paged" 1 --attention-backend paged
greedy flash_graphs "flash, CUDA graphs" 1 --attention-backend flash --cuda-graphs  # issue 45: replayed decode steps
greedy paged_graphs "paged, CUDA graphs" 1 --attention-backend paged --cuda-graphs
greedy fused "flash, CUDA graphs + fused kernels" 1 --attention-backend flash --cuda-graphs --fused-kernels
greedy f16_kv "f16 KV" 0 --kv-cache-dtype f16
greedy int8_act "int8 activations" 0 --activations int8

# ---- ceilings and speed --------------------------------------------------------------------------------
# gpu_step ID NAME NEEDS_MODEL TIMEOUT_S CMD...: a step that needs the GPU (and the model, when 1).
gpu_step() {
  local id="$1" name="$2" needs_model="$3" limit="$4"
  shift 4
  want "$id" "$name" || return 0
  if ! ((gpu)) || { ((needs_model)) && [[ -z "$model" ]]; }; then
    skip "$id" "$name" "$(gpu_reason)"
    return 0
  fi
  run "$id" "$name" "$limit" "$@"
}
gpu_step ceiling "bf16 matmul ceiling (PyTorch)" 0 90 "$python" -c '
import json, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
for _ in range(3): a @ b
torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(10): a @ b
e.record(); torch.cuda.synchronize()
ms = s.elapsed_time(e) / 10
print(json.dumps({"bf16_matmul_tflops": 2 * 8192**3 / (ms * 1e-3) / 1e12, "n": 8192}))'
gpu_step bench_decode "bench_cuda_decode" 1 240 "$bin/bench_cuda_decode" --model "$model" --repeats 5 --json
gpu_step ch07 "ch07_flash_attention kernels --device cuda" 0 180 "$bin/ch07_flash_attention" kernels --device cuda --json
# issue 45: each decode matmul kernel alone, GB/s against the copy rate
gpu_step bench_gemv "bench_cuda_gemv" 1 120 "$bin/bench_cuda_gemv" --model "$model" --out "$out/cuda_gemv"

# ---- the peer on the same card (issue 45): llama.cpp's CUDA build, when the bundle carries it ---------
# scripts/gpu_bundle.sh packs build-llama-cuda/ (bench/batched/build_llama_tools.sh --cuda-arch N, made
# without a GPU) as llama-cuda.tar.xz. Both comparisons interleave the engines, 5 rounds, and write their
# own results files into $out: cuda_peer_decode.* (batch 1: llama-bench pp512 / tg128 against lio
# generate, eager and with CUDA graphs) and cuda_batched.* (llama-batched-bench against lio batch).
llama_dir=""
if { selected peer_decode || selected peer_batched; } && [[ -n "$from" && -f "$from/llama-cuda.tar.xz" ]]; then
  if tar -C "$work" -xJf "$from/llama-cuda.tar.xz" 2>/dev/null ||
     "$python" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$from/llama-cuda.tar.xz" "$work"; then
    llama_dir="$work/llama-cuda"
    export LD_LIBRARY_PATH="$llama_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
fi
# The two peer command lines, built here whatever runs: the dry run parses them (each script's
# --check-args), so a flag the script cannot read fails here, not on the next GPU loan (issue 60:
# `--lio-args "--cuda-graphs"` made argparse exit 2, as a value that starts with `--` reads as a
# flag; `--lio-args=...` binds it).
peer_llama="${llama_dir:-<llama-cuda>}"
peer_model="${model:-<model>}"
# peer ID CHECK_NAME NAME TIMEOUT_S CMD...: CMD --check-args in every run, CMD itself on the GPU.
peer() {
  local id="$1" check="$2" name="$3" limit="$4"
  shift 4
  want "$id" "$name" || return 0
  run "$id" "$check" 60 "$@" --check-args
  if ((gpu)) && [[ -n "$model" && -n "$llama_dir" ]]; then
    run "$id" "$name" "$limit" "$@"
  elif ((!gpu)); then
    skip "$id" "$name" "$no_gpu"
  elif [[ -z "$llama_dir" ]]; then
    skip "$id" "$name" "the bundle carries no llama-cuda.tar.xz (bench/batched/build_llama_tools.sh --cuda-arch N, then scripts/gpu_bundle.sh)"
  else
    skip "$id" "$name" "no model"
  fi
}
peer peer_decode "peer.py command line parses (--check-args)" "peer: batch-1 decode and prefill vs llama-bench (CUDA)" 200 \
  "$python" "$root/bench/cuda_decode/peer.py" --lio "$bin/lio" --llama-bench "$peer_llama/bin/llama-bench" \
  --model "$peer_model" --out "$out/cuda_peer_decode"
peer peer_batched "batched/run.py command line parses (--check-args)" "peer: batched decode vs llama-batched-bench (CUDA)" 240 \
  "$python" "$root/bench/batched/run.py" --device cuda --lio "$bin/lio" \
  --llama-bench "$peer_llama/bin/llama-batched-bench" --model "$peer_model" --concurrency 1,4,16,64 \
  --prompt-tokens 128 --gen-tokens 128 --lio-args=--cuda-graphs --out "$out/cuda_batched"

# ---- the report ------------------------------------------------------------------------------------------
say "writing the report"
"$python" - "$work/steps.tsv" >"$steps" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    sid, name, status, seconds, detail, log = line.rstrip("\n").split("\t")
    print(json.dumps({"id": sid, "name": name, "status": status, "seconds": float(seconds), "detail": detail, "log": log}))
PY
tar -C "$work" -czf "$out/gpu_check_logs.tar.gz" logs gtest steps.jsonl 2>/dev/null
"$python" "$root/scripts/gpu_check_report.py" --work "$work" --out "$out" --commit "$commit" \
  --gpu "$gpu_name" --driver "$driver" --dry-run "$dry" --manifest "${manifest:-}" --command "$command_line"
report_rc=$?
failed=$(grep -c '"status": "failed"' "$steps")
say "done in $((SECONDS - t_start)) s: $(grep -c '"status": "passed"' "$steps") passed, $failed failed, $(grep -c '"status": "skipped"' "$steps") skipped"
ls -l "$out"
# The ids to recheck, ready for --only: the failed steps, and those the time budget left out.
"$python" - "$steps" <<'PY'
import json, sys
steps = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
def ids(keep):
    return ",".join(dict.fromkeys(s["id"] for s in steps if keep(s)))
failed = ids(lambda s: s["status"] == "failed")
late = ids(lambda s: s["status"] == "skipped" and s["detail"].startswith("time budget"))
if failed:
    print(f"rerun the failed steps: bash scripts/gpu_check.sh --from /tmp/lio-gpu --out \"$OUT\" --only {failed}")
if late:
    print(f"not run within the time budget: --only {late}")
PY
if ((report_rc != 0 || failed > 0)); then exit 1; fi
if ((!dry && !gpu)); then
  echo "gpu_check.sh: no GPU answered nvidia-smi (use --dry-run to check without one)" >&2
  exit 3
fi
exit 0
