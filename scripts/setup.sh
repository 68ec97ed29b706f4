#!/usr/bin/env bash
# setup.sh — installs everything LIO needs and builds it. Idempotent; safe to re-run.
#   1. Debian packages (compiler, CMake, Ninja, Eigen, CLI11, GoogleTest, Google Benchmark,
#      Doxygen, nlohmann-json, PCRE2, OpenMP) — with sudo when not root.
#   2. Python tooling venv at .venv (pinned: scripts/requirements.txt).
#   3. The model (scripts/fetch_model.sh).
#   4. Configure + build (CMake preset "default"; CUDA kernels too when nvcc is found).
# Flags: --no-build (steps 1-3 only), --preset NAME (default: default).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build=1
preset=default
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-build) build=0 ;;
    --preset) preset="$2"; shift ;;
    *) echo "setup.sh: unknown flag $1" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "[setup] $*"; }
sudo_cmd=()
[[ "$(id -u)" == 0 ]] || sudo_cmd=(sudo)

# ---- 1. system packages ----------------------------------------------------------------
apt_pkgs=(build-essential cmake ninja-build pkg-config git python3 python3-venv python3-pip
          libeigen3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev doxygen graphviz
          nlohmann-json3-dev libpcre2-dev libxxhash-dev libcpp-httplib-dev)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  log "Debian packages present"
fi

# ---- 2. Python tooling venv ------------------------------------------------------------
stamp=.venv/.lio-requirements
if [[ ! -f "$stamp" ]] || ! cmp -s scripts/requirements.txt "$stamp"; then
  log "creating .venv (llama-cpp-python compiles llama.cpp from source: a few minutes)"
  [[ -x .venv/bin/python ]] || python3 -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" .venv/bin/python -m pip install --quiet -r scripts/requirements.txt
  cp scripts/requirements.txt "$stamp"
else
  log ".venv up to date"
fi

# ---- 3. model --------------------------------------------------------------------------
bash scripts/fetch_model.sh
# An F32 copy made by llama.cpp's own quantize API: the conformance test's strict case and
# the benchmark's F32 row (~540 MB, gitignored).
.venv/bin/python scripts/make_f32_copy.py models/SmolLM2-135M-Instruct.Q4_1.gguf \
  models/SmolLM2-135M-Instruct.F32.gguf

# ---- 4. build --------------------------------------------------------------------------
if ((build)); then
  log "configuring and building (preset $preset)"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$(nproc)"
  log "built: $(ls build/bin 2>/dev/null | tr '\n' ' ')"
fi
