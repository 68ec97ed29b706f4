#!/usr/bin/env bash
# grade.sh NN — grades your chapter NN exercises: configures a learner build (build-learner/)
# in which chapter NN comes from exercises/ (your code) and everything else from solutions/,
# builds it, runs `ctest -L chNN`, and prints a pass/fail table per task and a score.
# On the untouched stubs every task fails: that is the starting point.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
nn="${1:-}"
if [[ ! "$nn" =~ ^[0-9][0-9]$ ]]; then
  echo "usage: scripts/grade.sh NN   (e.g. scripts/grade.sh 01)" >&2
  exit 2
fi
if ! ls -d "exercises/${nn}_"* >/dev/null 2>&1; then
  echo "grade.sh: chapter $nn has no exercises/ directory" >&2
  exit 2
fi
build=build-learner
echo "[grade] configuring $build with chapter $nn from exercises/"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLIO_EXERCISES="$nn" \
  -DLIO_CHECK_STUBS=OFF -DLIO_BUILD_BENCH=OFF >/dev/null || exit 1
echo "[grade] building"
if ! cmake --build "$build" -j "$(nproc)" >"$build/grade_build.log" 2>&1; then
  echo "[grade] build failed — your code does not compile yet:"
  grep -E "error|Error" "$build/grade_build.log" | head -20
  exit 1
fi
mapfile -t tests < <(ctest --test-dir "$build" -N -L "ch${nn}" | sed -n 's/^ *Test *#[0-9]*: //p')
if ((${#tests[@]} == 0)); then
  echo "grade.sh: no grading tests labelled ch${nn}" >&2
  exit 2
fi
passed=0
printf "\n%-44s %s\n" "task" "result"
for t in "${tests[@]}"; do
  if ctest --test-dir "$build" -R "^${t}\$" --output-on-failure >"$build/grade_${t}.log" 2>&1; then
    printf "%-44s %s\n" "$t" "PASS"; ((passed++))
  else
    # The stub's hint when a stub is still there, else the first failed expectation.
    reason=$(grep -m1 -oE "Task [0-9]+ \([^)]*\): [^\"]*" "$build/grade_${t}.log")
    [[ -n "$reason" ]] || reason=$(grep -m1 -A1 "Failure" "$build/grade_${t}.log" | tail -1 | sed 's/^ *//')
    printf "%-44s %s  %s\n" "$t" "FAIL" "${reason:0:90}"
  fi
done
printf "\nscore: %d / %d tasks   (details: %s/grade_<task>.log; one task: ctest --test-dir %s -R ch%s_task_K)\n" \
  "$passed" "${#tests[@]}" "$build" "$build" "$nn"
((passed == ${#tests[@]}))
