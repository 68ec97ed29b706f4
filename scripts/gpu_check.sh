#!/usr/bin/env bash
# gpu_check.sh — the GPU check: everything LIO's CUDA path must prove, in ONE device call of at
# most 8 minutes, from binaries built elsewhere (scripts/gpu_bundle.sh). It never stops at the
# first failure: every step runs (each under its own timeout), and the report says what passed.
#
#   bash scripts/gpu_check.sh --from /tmp/lio-gpu [--out DIR]    on the lent GPU machine
#   bash scripts/gpu_check.sh --dry-run --bin-dir build/bin      anywhere: what needs no GPU
#
# --from DIR     holds lio-gpu.tar.xz (and model.partNN: reassembled and sha256-checked against the
#                bundle's MANIFEST.txt); --bin-dir DIR runs a build's binaries instead.
# --out DIR      where the report goes ($OUT on the device machine; default build/gpu_check):
#                cuda_<gpu>_validation.md and .json, gpu_check.log (every step's output, the last
#                60 lines of each) and gpu_check_logs.tar.gz (whole logs and gtest JSON).
# --dry-run      no GPU is used: the GPU steps are reported as skipped, everything else runs, and
#                the exit status is 0 when nothing that ran failed (CI's gpu_check_dry_run test).
# --budget-s N   wall-time budget (default 450): a step that would start past it is skipped.
#
# Steps: GPU, driver and commit; shared libraries resolved (cuBLAS and NCCL from the image: the
# CUDA toolkit or PyTorch's nvidia-* wheels); the model; the host-side CUDA helpers; every CUDA
# gtest binary (JSON results; on the real model too: CUDA vs CPU logits for the f32 / f16 / int8 KV
# cache, int8 activations, each attention kernel and --dtype f32 / f16 / bf16); compute-sanitizer
# memcheck on the flash, paged + kv_append, MLA and elementwise kernels; the real model's logits
# again on re-quantized files (Q8_0, Q4_0, Q3_1); `lio generate` greedy text on CPU and CUDA with
# flash, naive and paged attention, flash and paged with --cuda-graphs (and the f16 KV cache, int8
# activations: reported); the bf16 matmul ceiling (PyTorch); bench_cuda_decode (flash vs paged, eager
# vs CUDA graph, launches per token, GB/s against the copy bandwidth); ch07_flash_attention kernels --device cuda (TFLOP/s against the ceiling);
# bench_cuda_gemv (each decode matmul kernel alone, fused and unfused: GB/s against the copy rate);
# when the bundle carries llama.cpp's CUDA build, the peer on the same card (bench/cuda_decode/peer.py,
# bench/batched/run.py --device cuda), each writing its own results files into --out; their command
# lines are parsed (--check-args) in every run, the dry run too.
# Exit status: 0 when every step that ran passed; 1 when one failed; 3 when no GPU answered
# without --dry-run (the report is written in every case). LIO_GPU_CHECK_ASSUME_GPU=1 runs the GPU
# steps without a GPU, to test this script's own paths there (they fail, and the report says so).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

from=""
bin_dir=""
out="${OUT:-}"
dry=0
budget_s=450
while [[ $# -gt 0 ]]; do
  case "$1" in
    --from) from="$2"; shift ;;
    --bin-dir) bin_dir="$2"; shift ;;
    --out) out="$2"; shift ;;
    --dry-run) dry=1 ;;
    --budget-s) budget_s="$2"; shift ;;
    -h|--help) sed -n '2,30p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_check.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ -n "$out" ]] || out=build/gpu_check
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d /tmp/lio-gpu-check.XXXXXX)"
trap 'rm -rf "$work"' EXIT  # the logs leave in $out/gpu_check_logs.tar.gz
mkdir -p "$work/logs" "$work/gtest"
steps="$work/steps.jsonl"
: >"$steps"
main_log="$out/gpu_check.log"
exec > >(tee "$main_log") 2>&1
t_start=$SECONDS
python=$(command -v python3 || command -v python)

say() { echo "[gpu_check $(date -u +%T) +$((SECONDS - t_start))s] $*"; }

# record NAME STATUS SECONDS DETAIL [LOG]: one step's line in steps.jsonl.
record() {
  "$python" - "$@" >>"$steps" <<'EOF'
import json, sys
name, status, seconds, detail = sys.argv[1:5]
log = sys.argv[5] if len(sys.argv) > 5 else ""
print(json.dumps({"name": name, "status": status, "seconds": float(seconds), "detail": detail, "log": log}))
EOF
  say "$2: $1${4:+ ($4)}"
}

skip() { record "$1" skipped 0 "$2"; }

# run NAME TIMEOUT_S CMD...: runs CMD under `timeout`, its output in logs/NAME.log and this log.
run() {
  local name="$1" limit="$2"
  shift 2
  if ((SECONDS - t_start + 5 > budget_s)); then
    skip "$name" "time budget of $budget_s s spent"
    return 1
  fi
  local slug log t0 rc status detail=""
  slug=${name//[^A-Za-z0-9_.-]/_}
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
  record "$name" "$status" $((SECONDS - t0)) "$detail" "logs/$slug.log"
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
say "commit $commit, GPU: $gpu_name (driver $driver), dry run: $dry, binaries: $bin"
if ((gpu)) && command -v nvidia-smi >/dev/null; then
  run "nvidia-smi" 30 nvidia-smi
else
  skip "nvidia-smi" "no GPU (dry run)"
fi

# ---- shared libraries: the bundle's own, then the image's CUDA libraries where ldd misses them ---
lib_search() {  # directories that may hold CUDA libraries on this machine
  ls -d /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-*/lib64 /usr/local/cuda-*/lib \
    /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu 2>/dev/null
  "$python" -c 'import glob, site
for p in site.getsitepackages() + [site.getusersitepackages()]:
    for d in sorted(glob.glob(p + "/nvidia/*/lib")) + sorted(glob.glob(p + "/torch/lib")): print(d)' 2>/dev/null
}
resolve_libs() {
  local missing found extra="" lib d
  missing=$(for b in "$bin"/*; do ldd "$b" 2>/dev/null; done | awk '/not found/ {print $1}' | sort -u)
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
  still=$(for b in "$bin"/*; do ldd "$b" 2>/dev/null; done | grep -E 'not found' | sort -u)
  if [[ -n "$still" ]]; then
    echo "still missing:"
    echo "$still"
    return 1
  fi
}
t0=$SECONDS
resolve_libs >"$work/logs/libraries.log" 2>&1
rc=$?
cat "$work/logs/libraries.log"
if ((rc == 0)); then
  record "shared libraries" passed $((SECONDS - t0)) "$(grep -c -- '->' "$work/logs/libraries.log") resolved from the image" logs/libraries.log
else
  record "shared libraries" failed $((SECONDS - t0)) "some library is missing" logs/libraries.log
fi

# ---- the model ------------------------------------------------------------------------------------
model=""
if [[ -n "$from" ]] && compgen -G "$from/model.part*" >/dev/null; then
  t0=$SECONDS
  cat "$from"/model.part* >"$work/model.gguf"
  want="$(mf model_sha256)"
  got="$(sha256sum "$work/model.gguf" | cut -d' ' -f1)"
  if [[ -n "$want" && "$got" == "$want" ]]; then
    model="$work/model.gguf"
    record "model reassembled" passed $((SECONDS - t0)) "$(mf model), sha256 ${got:0:12}... as the manifest"
  else
    record "model reassembled" failed $((SECONDS - t0)) "sha256 $got, manifest ${want:-missing}"
  fi
elif [[ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]]; then
  model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  record "model" passed 0 "models/SmolLM2-135M-Instruct.Q4_1.gguf (checkout)"
else
  skip "model" "no model parts and no models/ file: the real-model steps skip"
fi
[[ -n "$model" ]] && export LIO_MODEL="$model"

# ---- gtest binaries: host helpers everywhere, every CUDA test (they skip their GPU cases without one)
mapfile -t tests < <(cd "$bin" && ls test_cuda_* 2>/dev/null)
((${#tests[@]})) || record "CUDA test binaries" failed 0 "no test_cuda_* binary in $bin"
for t in "${tests[@]}"; do
  limit=120
  [[ "$t" == test_cuda_runner ]] && limit=300
  run "gtest $t" "$limit" "$bin/$t" --gtest_output="json:$work/gtest/$t.json"
done

# ---- compute-sanitizer memcheck on the kernels that index through block tables ----------------------
sanitize() {  # NAME BINARY FILTER
  if ((!gpu)); then skip "memcheck $1" "no GPU (dry run)"; return; fi
  if ! command -v compute-sanitizer >/dev/null; then skip "memcheck $1" "compute-sanitizer not on PATH"; return; fi
  run "memcheck $1" 150 compute-sanitizer --tool memcheck --error-exitcode 1 --print-limit 20 \
    "$bin/$2" --gtest_filter="$3"
}
sanitize "flash + naive attention" test_cuda_flash_attention \
  'FlashAttention.QueryTileEdges*:FlashAttention.MixedPrefill*:FlashAttention.NonCausal*:FlashAttention.Workspace*:NaiveAttention.*'
sanitize "paged attention + kv_append" test_cuda_paged_attention 'CudaPagedAttention.MatchesHost*:CudaKvAppend.*:CudaPagedAttentionQuantized.*'
sanitize "MLA" test_cuda_mla 'CudaMla.AttentionMatchesCpuAtSmallOddShapes:CudaMla.LatentAppend*:CudaMla.Rope*'
sanitize "runner (tiny models, every op)" test_cuda_runner \
  'CudaRunnerTest.MixedBatchMatchesCpu:CudaRunnerTest.HeadDim256*:CudaRunnerTest.Reserved*:CudaRunnerTest.Int8ActivationsRound*:CudaRunnerTest.SwapIn*:CudaRunnerTest.EngineSwapPreemptionMatchesCpu'

# ---- the real model on re-quantized files: more weight readers against the CPU ----------------------
if ((gpu)) && [[ -n "$model" ]]; then
  for spec in "q8_0:--bits 8" "q4_0:--bits 4" "q3_1:--bits 3 --asymmetric"; do
    name="${spec%%:*}"
    read -r -a qargs <<<"${spec#*:}"
    q="$work/model.$name.gguf"
    if run "quantize $name" 120 "$bin/lio" quantize --model "$model" --out "$q" "${qargs[@]}"; then
      LIO_MODEL="$q" run "real model $name: CUDA vs CPU logits" 180 "$bin/test_cuda_runner" \
        --gtest_filter='CudaRunnerTest.RealModelEveryConfigMatchesCpu' --gtest_output="json:$work/gtest/real_model_$name.json"
    fi
  done
else
  skip "real model re-quantized: CUDA vs CPU logits" "$( ((gpu)) && echo "no model" || echo "no GPU (dry run)")"
fi

# ---- greedy text: CPU and CUDA must write the same words ----------------------------------------------
greedy() {  # NAME REQUIRED EXTRA_FLAGS...
  local name="$1" required="$2"
  shift 2
  local prompt="The capital of France is"
  local a="$work/greedy_${name// /_}_cpu.json" b="$work/greedy_${name// /_}_cuda.json"
  run "generate $name (cpu)" 120 "$bin/lio" generate --model "$model" --prompt "$prompt" --max-tokens 48 \
    --temperature 0 --json --device cpu "$@" || true
  cp "$work/logs/generate_${name// /_}__cpu_.log" "$a" 2>/dev/null
  run "generate $name (cuda)" 120 "$bin/lio" generate --model "$model" --prompt "$prompt" --max-tokens 48 \
    --temperature 0 --json --device cuda "$@" || true
  cp "$work/logs/generate_${name// /_}__cuda_.log" "$b" 2>/dev/null
  "$python" - "$a" "$b" "$name" "$required" >"$work/logs/greedy_${name// /_}.txt" <<'EOF'
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
EOF
  local same
  same=$("$python" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(int(d["same_text"]))' "$work/logs/greedy_${name// /_}.txt" 2>/dev/null || echo 0)
  if ((same)); then
    record "greedy text $name: CPU == CUDA" passed 0 "" "logs/greedy_${name// /_}.txt"
  elif ((required)); then
    record "greedy text $name: CPU == CUDA" failed 0 "the texts differ" "logs/greedy_${name// /_}.txt"
  else
    record "greedy text $name: CPU == CUDA" passed 0 "texts differ (an int8 / f16 rounding may flip a token; reported, not required)" "logs/greedy_${name// /_}.txt"
  fi
}
if ((gpu)) && [[ -n "$model" ]]; then
  greedy "flash" 1 --attention-backend flash
  greedy "naive" 1 --attention-backend naive
  greedy "paged" 1 --attention-backend paged
  greedy "flash, CUDA graphs" 1 --attention-backend flash --cuda-graphs  # issue 45: replayed decode steps
  greedy "paged, CUDA graphs" 1 --attention-backend paged --cuda-graphs
  greedy "flash, CUDA graphs + fused kernels" 1 --attention-backend flash --cuda-graphs --fused-kernels
  greedy "f16 KV" 0 --kv-cache-dtype f16
  greedy "int8 activations" 0 --activations int8
else
  skip "greedy text CPU == CUDA" "$( ((gpu)) && echo "no model" || echo "no GPU (dry run)")"
fi

# ---- ceilings and speed --------------------------------------------------------------------------------
if ((gpu)); then
  run "bf16 matmul ceiling (PyTorch)" 90 "$python" -c '
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
  if [[ -n "$model" ]]; then
    run "bench_cuda_decode" 240 "$bin/bench_cuda_decode" --model "$model" --repeats 5 --json
  else
    skip "bench_cuda_decode" "no model"
  fi
  run "ch07_flash_attention kernels --device cuda" 180 "$bin/ch07_flash_attention" kernels --device cuda --json
  if [[ -n "$model" ]]; then  # issue 45: each decode matmul kernel alone, GB/s against the copy rate
    run "bench_cuda_gemv" 120 "$bin/bench_cuda_gemv" --model "$model" --out "$out/cuda_gemv"
  else
    skip "bench_cuda_gemv" "no model"
  fi
else
  skip "bf16 matmul ceiling (PyTorch)" "no GPU (dry run)"
  skip "bench_cuda_decode" "no GPU (dry run)"
  skip "ch07_flash_attention kernels --device cuda" "no GPU (dry run)"
  skip "bench_cuda_gemv" "no GPU (dry run)"
fi

# ---- the peer on the same card (issue 45): llama.cpp's CUDA build, when the bundle carries it ---------
# scripts/gpu_bundle.sh packs build-llama-cuda/ (bench/batched/build_llama_tools.sh --cuda-arch N, made
# without a GPU) as llama-cuda.tar.xz. Both comparisons interleave the engines, 5 rounds, and write their
# own results files into $out: cuda_peer_decode.* (batch 1: llama-bench pp512 / tg128 against lio
# generate, eager and with CUDA graphs) and cuda_batched.* (llama-batched-bench against lio batch).
llama_dir=""
if [[ -n "$from" && -f "$from/llama-cuda.tar.xz" ]]; then
  if tar -C "$work" -xJf "$from/llama-cuda.tar.xz" 2>/dev/null ||
     "$python" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$from/llama-cuda.tar.xz" "$work"; then
    llama_dir="$work/llama-cuda"
  fi
fi
# The two peer command lines, built here whatever runs: the dry run parses them (each script's
# --check-args), so a flag the script cannot read fails here, not on the next GPU loan (issue 60:
# `--lio-args "--cuda-graphs"` made argparse exit 2, as a value that starts with `--` reads as a
# flag; `--lio-args=...` binds it).
peer_llama="${llama_dir:-<llama-cuda>}"
peer_model="${model:-<model>}"
peer_decode_cmd=("$python" "$root/bench/cuda_decode/peer.py" --lio "$bin/lio" --llama-bench "$peer_llama/bin/llama-bench"
  --model "$peer_model" --out "$out/cuda_peer_decode")
peer_batched_cmd=("$python" "$root/bench/batched/run.py" --device cuda --lio "$bin/lio"
  --llama-bench "$peer_llama/bin/llama-batched-bench" --model "$peer_model" --concurrency 1,4,16,64
  --prompt-tokens 128 --gen-tokens 128 --lio-args=--cuda-graphs --out "$out/cuda_batched")
run "peer.py command line parses (--check-args)" 60 "${peer_decode_cmd[@]}" --check-args
run "batched/run.py command line parses (--check-args)" 60 "${peer_batched_cmd[@]}" --check-args
if ((gpu)) && [[ -n "$model" && -n "$llama_dir" ]]; then
  export LD_LIBRARY_PATH="$llama_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  run "peer: batch-1 decode and prefill vs llama-bench (CUDA)" 200 "${peer_decode_cmd[@]}"
  run "peer: batched decode vs llama-batched-bench (CUDA)" 240 "${peer_batched_cmd[@]}"
else
  skip "peer: llama.cpp CUDA on the same card" "$( ((gpu)) || echo "no GPU (dry run)"; ((gpu)) && [[ -z "$llama_dir" ]] && echo "the bundle carries no llama-cuda.tar.xz (bench/batched/build_llama_tools.sh --cuda-arch N, then scripts/gpu_bundle.sh)"; ((gpu)) && [[ -n "$llama_dir" && -z "$model" ]] && echo "no model")"
fi

# ---- the report ------------------------------------------------------------------------------------------
say "writing the report"
tar -C "$work" -czf "$out/gpu_check_logs.tar.gz" logs gtest steps.jsonl 2>/dev/null
"$python" "$root/scripts/gpu_check_report.py" --work "$work" --out "$out" --commit "$commit" \
  --gpu "$gpu_name" --driver "$driver" --dry-run "$dry" --manifest "${manifest:-}" \
  --command "bash scripts/gpu_check.sh $( [[ -n "$from" ]] && echo "--from <dir>" ) $( ((dry)) && echo "--dry-run" )"
report_rc=$?
failed=$(grep -c '"status": "failed"' "$steps")
say "done in $((SECONDS - t_start)) s: $(grep -c '"status": "passed"' "$steps") passed, $failed failed, $(grep -c '"status": "skipped"' "$steps") skipped"
ls -l "$out"
if ((report_rc != 0 || failed > 0)); then exit 1; fi
if ((!dry && !gpu)); then
  echo "gpu_check.sh: no GPU answered nvidia-smi (use --dry-run to check without one)" >&2
  exit 3
fi
exit 0
