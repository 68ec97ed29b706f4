#!/usr/bin/env bash
# grade.sh NN — grades your chapter NN exercises: configures a learner build (build-learner/)
# in which chapter NN comes from exercises/ (your code) and everything else from solutions/,
# builds only the programs chapter NN's grading tests run (the target grade_chNN,
# tests/grade/CMakeLists.txt; the CUDA kernels only where a GPU answers `nvidia-smi -L`), runs
# them, and prints a pass/fail table per task and a score.
# On the untouched stubs every task fails: that is the starting point.
#
# Works right after scripts/run.sh: what grading needs beyond running (GoogleTest) is checked
# first and installed as scripts/setup.sh installs packages (apt-get, with sudo unless root);
# where it cannot install, it prints the one command to run and stops (exit 3).
#
#   scripts/grade.sh NN              grade chapter NN (e.g. 01)
#   scripts/grade.sh --check-deps [NN]
#                                    only check what grading needs; install nothing, build
#                                    nothing; exit 0 when all is there, 3 when not
# Each phase prints "[grade] PHASE took N s" (bench/fresh_machine/report.py reads them). Logs:
# build-learner/grade_configure.log, grade_build.log, grade_<task>.log.
# LIO_GRADE_ASSUME_MISSING="pkg ..." (for tests/cli/grade_args.sh): treat these Debian packages
# as missing, to see the message without uninstalling anything.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build=build-learner
usage="usage: scripts/grade.sh NN   (e.g. scripts/grade.sh 01), or scripts/grade.sh --check-deps [NN]"

nn="" check_only=0
for arg in "$@"; do
  case "$arg" in
    --check-deps) check_only=1 ;;
    -h | --help) echo "$usage"; exit 0 ;;
    [0-9][0-9]) [[ -z "$nn" ]] || { echo "grade.sh: one chapter at a time" >&2; exit 2; }; nn="$arg" ;;
    *) echo "grade.sh: unexpected argument '$arg'" >&2; echo "$usage" >&2; exit 2 ;;
  esac
done
if [[ -z "$nn" ]] && ((!check_only)); then
  echo "$usage" >&2
  exit 2
fi
if [[ -n "$nn" ]] && ! ls -d "exercises/${nn}_"* >/dev/null 2>&1; then
  echo "grade.sh: chapter $nn has no exercises/ directory (chapters: $(ls exercises | cut -c1-2 | paste -sd' '))" >&2
  exit 2
fi

# ---- 1. what configuring and building the learner tree needs --------------------------------
# Programs on PATH, each with the Debian package that provides it.
commands=(cmake:cmake ninja:ninja-build c++:build-essential pkg-config:pkg-config python3:python3)
# Libraries CMake's find_package / pkg_check_modules look for (CMakeLists.txt, tests/): all but
# GoogleTest come with scripts/run.sh's packages. Checked with dpkg where there is one, as
# setup.sh checks them; elsewhere configure's own message (printed below) names what is missing.
libraries=(libgtest-dev libeigen3-dev libcli11-dev nlohmann-json3-dev libpcre2-dev libxxhash-dev
           libcpp-httplib-dev)
# Chapter 08's Tasks 2 and 5 run as MPI jobs: without Open MPI they are not even registered.
[[ "$nn" != 08 ]] || libraries+=(openmpi-bin libopenmpi-dev)
declare -A why=([libgtest-dev]="GoogleTest, which the grading tests are written in"
                [openmpi-bin]="mpirun, for chapter 08's MPI tasks" [libopenmpi-dev]="MPI, for chapter 08's MPI tasks")
assumed_missing=" ${LIO_GRADE_ASSUME_MISSING:-} "

missing=()  # Debian packages
check_deps() {
  missing=()
  local entry cmd pkg
  for entry in "${commands[@]}"; do
    cmd="${entry%%:*}" pkg="${entry#*:}"
    if [[ "$assumed_missing" == *" $pkg "* ]] || ! command -v "$cmd" >/dev/null 2>&1; then
      echo "[grade] missing: $cmd (Debian package $pkg)" >&2
      missing+=("$pkg")
    fi
  done
  local dpkg=0
  command -v dpkg-query >/dev/null 2>&1 && dpkg=1
  for pkg in "${libraries[@]}"; do
    if [[ "$assumed_missing" == *" $pkg "* ]] || { ((dpkg)) &&
       ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; }; then
      echo "[grade] missing: Debian package $pkg${why[$pkg]:+ (${why[$pkg]})}" >&2
      missing+=("$pkg")
    fi
  done
}

t_deps=$SECONDS
check_deps
if ((${#missing[@]})); then
  sudo_cmd=()
  [[ "$(id -u)" == 0 ]] || sudo_cmd=(sudo)
  install_line="${sudo_cmd[*]:+sudo }apt-get update && ${sudo_cmd[*]:+sudo }apt-get install -y --no-install-recommends ${missing[*]}"
  can_install=0
  if ((!check_only)) && command -v apt-get >/dev/null 2>&1; then
    { ((${#sudo_cmd[@]} == 0)) || sudo -n true 2>/dev/null; } && can_install=1
  fi
  if ((!can_install)); then
    echo "grade.sh: grading needs ${missing[*]}; install with:" >&2
    echo "  $install_line" >&2
    exit 3
  fi
  echo "[grade] installing Debian packages: ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
    { echo "grade.sh: installing failed; run it yourself:" >&2; echo "  $install_line" >&2; exit 3; }
  assumed_missing="  "
  check_deps
  ((${#missing[@]} == 0)) || { echo "grade.sh: still missing after the install: ${missing[*]}" >&2; exit 3; }
  echo "[grade] packages took $((SECONDS - t_deps)) s"
fi
if ((check_only)); then
  echo "[grade] everything grading needs is there"
  exit 0
fi

# ---- 2. configure ------------------------------------------------------------------------------
mkdir -p "$build"
# The CUDA kernels only where a GPU answers, as setup.sh --run decides: with nvcc but no GPU their
# tests would skip, and chapter 08's grading programs would wait on 17 nvcc compilations.
cuda=OFF
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  cuda=AUTO
fi
echo "[grade] configuring $build with chapter $nn from exercises/ (CUDA $cuda)"
t0=$SECONDS
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLIO_EXERCISES="$nn" -DLIO_CUDA="$cuda" \
     -DLIO_CHECK_STUBS=OFF -DLIO_BUILD_BENCH=OFF >"$build/grade_configure.log" 2>&1; then
  echo "grade.sh: configuring failed; the end of CMake's output ($build/grade_configure.log):" >&2
  tail -n 25 "$build/grade_configure.log" >&2
  grep -q "Could NOT find GTest\|GTestConfig.cmake" "$build/grade_configure.log" &&
    echo "grade.sh: GoogleTest was not found: Debian package libgtest-dev" >&2
  exit 1
fi
echo "[grade] configure took $((SECONDS - t0)) s"

# ---- 3. build only what chapter NN's grading tests run -------------------------------------------
mapfile -t tests < <(ctest --test-dir "$build" -N -L "ch${nn}" | sed -n 's/^ *Test *#[0-9]*: //p')
if ((${#tests[@]} == 0)); then
  echo "grade.sh: no grading tests labelled ch${nn}" >&2
  exit 2
fi
target="grade_ch${nn}"
first_build=0
for t in "${tests[@]}"; do [[ -x "$build/bin/$t" ]] || first_build=1; done
if ((first_build)); then
  # Every command the target needs (all of them, on a first build), and how long a first build took
  # on a fresh clone (bench/fresh_machine/measure.sh --grade), scaled by the steps and the cores.
  steps=$(ninja -C "$build" -t commands "$target" 2>/dev/null | wc -l)
  estimate=$(python3 - "$steps" "$(nproc)" <<'PY' 2>/dev/null
import json, sys
r = json.load(open("bench/results/fresh_clone_grade_cpu.json"))
steps, cores = int(sys.argv[1]), int(sys.argv[2])
per_step = r["grade_build_seconds"] / r["grade_build_steps"] * r["machine"]["cores"] / cores
print(f"about {max(1, round(steps * per_step / 60))} min here (chapter {r['grade_chapter']}'s "
      f"{r['grade_build_steps']} steps took {r['grade_build_seconds'] / 60:.1f} min on a "
      f"{r['machine']['cores']}-core machine: bench/results/fresh_clone_grade_cpu.md)")
PY
)
  echo "[grade] first build of chapter $nn's tests: $steps steps, ${estimate:-a few minutes on a 2-core machine};" \
    "later runs rebuild only what you change"
else
  echo "[grade] building (only what changed)"
fi
t0=$SECONDS
if ! cmake --build "$build" -j "$(nproc)" --target "$target" >"$build/grade_build.log" 2>&1; then
  # Most often the learner's code does not compile yet: the compiler's errors say where.
  echo "[grade] build failed; its first errors ($build/grade_build.log has all of it):"
  grep -E "error|Error" "$build/grade_build.log" | head -20 | grep . || tail -n 20 "$build/grade_build.log"
  exit 1
fi
# ninja's last progress line, "[done/total] ...": the steps this build ran.
ran=$(grep -oE '^\[[0-9]+/[0-9]+\]' "$build/grade_build.log" | tail -1 | tr -d '[]' | cut -d/ -f2)
echo "[grade] build took $((SECONDS - t0)) s (${ran:-0} steps)"

# ---- 4. run each task's test ------------------------------------------------------------------------
t0=$SECONDS
passed=0 skipped=0
printf "\n%-44s %s\n" "task" "result"
for t in "${tests[@]}"; do
  if ctest --test-dir "$build" -R "^${t}\$" --output-on-failure >"$build/grade_${t}.log" 2>&1; then
    if grep -q '\*\*\*Skipped' "$build/grade_${t}.log"; then
      # A CUDA task (label cuda) that found no usable GPU: it compiled, and its cases skipped.
      printf "%-44s %s\n" "$t" "SKIP  a CUDA task, and no usable GPU answered it"; ((skipped++))
    else
      printf "%-44s %s\n" "$t" "PASS"; ((passed++))
    fi
  else
    # The stub's hint when a stub is still there, else the first failed expectation.
    reason=$(grep -m1 -oE "Task [0-9]+ \([^)]*\): [^\"]*" "$build/grade_${t}.log")
    [[ -n "$reason" ]] || reason=$(grep -m1 -A1 "Failure" "$build/grade_${t}.log" | tail -1 | sed 's/^ *//')
    printf "%-44s %s  %s\n" "$t" "FAIL" "${reason:0:90}"
  fi
done
printf "\nscore: %d / %d tasks%s   (details: %s/grade_<task>.log; one task: ctest --test-dir %s -R ch%s_task_K)\n" \
  "$passed" "${#tests[@]}" "$( ((skipped)) && echo ", $skipped skipped (no GPU)")" "$build" "$build" "$nn"
echo "[grade] tests took $((SECONDS - t0)) s"
((passed + skipped == ${#tests[@]}))
