#!/usr/bin/env bash
# Builds llama.cpp's batched-work peers (llama-batched-bench, optionally llama-server) for CPU from
# the llama.cpp source vendored in the pinned llama-cpp-python sdist (COURSE.md, "Performance
# method"). Idempotent: does nothing when the binaries already exist.
#
# Usage: bench/batched/build_llama_tools.sh [--server] [--perplexity] [--quantize] [--speculative] [--cuda]
#   --server      also build llama-server (slower; not needed by bench/batched/run.py)
#   --perplexity  also build llama-perplexity (chapter 03's perplexity check)
#   --quantize    also build llama-quantize (chapter 03's K-quant files: Q4_K_M made by llama.cpp)
#   --speculative also build llama-speculative, llama-lookup and llama-bench (chapter 06's peers)
#   --cuda        the CUDA build (issue 32's GPU peer: llama-bench, llama-batched-bench and
#                 llama-server with -DGGML_CUDA=ON, CMAKE_CUDA_ARCHITECTURES for the card that
#                 nvidia-smi reports, into build-llama-cuda/); needs nvcc and a GPU; run it on the
#                 lent machine itself (16 cores build it in minutes)
# Env: LLAMA_BUILD_DIR (default build-llama/, or build-llama-cuda/ with --cuda; gitignored by
# /build*/), LLAMA_SRC_PARENT (where the sdist is unpacked; default build-llama/src), JOBS (nproc).
# Output: $LLAMA_BUILD_DIR/bin/llama-batched-bench [, llama-server, llama-perplexity, llama-quantize].
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

cuda=0
for arg in "$@"; do [[ "$arg" == --cuda ]] && cuda=1; done
if ((cuda)); then
  build_dir="${LLAMA_BUILD_DIR:-$root/build-llama-cuda}"
else
  build_dir="${LLAMA_BUILD_DIR:-$root/build-llama}"
fi
jobs="${JOBS:-$(nproc)}"
targets=(llama-batched-bench)
((cuda)) && targets+=(llama-bench llama-server)
for arg in "$@"; do
  case "$arg" in
    --cuda) ;;
    --server) targets+=(llama-server) ;;
    --perplexity) targets+=(llama-perplexity) ;;
    --quantize) targets+=(llama-quantize) ;;
    --speculative) targets+=(llama-speculative llama-lookup llama-bench) ;;
    *) echo "build_llama_tools: unknown option '$arg' (want --server, --perplexity, --quantize, --speculative, --cuda)" >&2; exit 2 ;;
  esac
done

missing=()
for t in "${targets[@]}"; do
  [[ -x "$build_dir/bin/$t" ]] || missing+=("$t")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "build_llama_tools: up to date: ${targets[*]} in $build_dir/bin" >&2
  exit 0
fi

# The pin lives in one place: scripts/requirements.txt.
pin="$(grep -E '^llama-cpp-python==' scripts/requirements.txt | head -n1 | cut -d= -f3)"
if [[ -z "$pin" ]]; then
  echo "build_llama_tools: no llama-cpp-python pin in scripts/requirements.txt" >&2
  exit 1
fi

# The sdist's source is shared by the CPU and CUDA builds (the GPU machine has no network: carry
# build-llama/src there).
src_parent="${LLAMA_SRC_PARENT:-$root/build-llama/src}"
src_dir="$src_parent/llama_cpp_python-$pin"
if [[ ! -f "$src_dir/vendor/llama.cpp/CMakeLists.txt" ]]; then
  mkdir -p "$src_parent"
  pip="$root/.venv/bin/pip"
  [[ -x "$pip" ]] || pip="pip"
  echo "build_llama_tools: downloading llama-cpp-python==$pin sdist" >&2
  "$pip" download --no-binary :all: --no-deps "llama-cpp-python==$pin" -d "$src_parent" >&2
  tarball="$(ls "$src_parent"/llama_cpp_python-"$pin".tar.gz 2>/dev/null ||
    ls "$src_parent"/llama-cpp-python-"$pin".tar.gz)"
  tar -xzf "$tarball" -C "$src_parent"
  # The sdist's top folder may use either spelling.
  if [[ ! -d "$src_dir" && -d "$src_parent/llama-cpp-python-$pin" ]]; then
    mv "$src_parent/llama-cpp-python-$pin" "$src_dir"
  fi
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
backend=(-DGGML_CUDA=OFF)
if ((cuda)); then
  # The card's architecture only (compute capability 9.0 -> 90): one target keeps the build short.
  arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d '. ')"
  if [[ -z "$arch" ]]; then
    echo "build_llama_tools: --cuda needs a GPU that nvidia-smi reports (none here)" >&2
    exit 1
  fi
  backend=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch")
fi
# GGML_NATIVE tunes the CPU code for this machine's ISA, as our own Release build does.
cmake -S "$src_dir/vendor/llama.cpp" -B "$build_dir" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  "${backend[@]}" -DGGML_METAL=OFF -DGGML_VULKAN=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=ON >&2
cmake --build "$build_dir" --target "${missing[@]}" -j "$jobs" >&2

for t in "${targets[@]}"; do
  if [[ ! -x "$build_dir/bin/$t" ]]; then
    echo "build_llama_tools: $t was not built" >&2
    exit 1
  fi
done
echo "build_llama_tools: built ${missing[*]} in $build_dir/bin" >&2
