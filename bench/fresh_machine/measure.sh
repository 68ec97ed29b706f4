#!/usr/bin/env bash
# measure.sh — how long a newcomer waits: the wall time of `scripts/run.sh` (until the answer is
# printed) and of `CI=true bash .ci/run` (until every test passed), each in its own fresh clone
# of this repository's HEAD, so no build, model or venv of this checkout is reused.
#
# What "fresh" covers: the clones start with no build/, models/ or .venv/. The Debian packages
# and pip's download cache of the machine are whatever it has: on a new machine the apt step
# adds its install time (recorded separately when --apt-seconds gives it) and pip downloads
# again. Run it on an otherwise idle machine: it measures the machine as much as the project.
#
# Usage: bench/fresh_machine/measure.sh [--skip-run] [--skip-ci] [--grade NN] [--runs K] [--busy N]
#                                       [--reruns R] [--rerun-busy M] [--note TEXT]
#                                       [--apt-seconds S] [--grade-apt-seconds S]
#                                       [--out bench/results/fresh_machine_cpu]
#   --grade NN then `scripts/grade.sh NN` in the same clone, right after run.sh: a learner's path
#              from a fresh clone to the first graded table (issue 61; its time is run.sh's plus
#              grade.sh's, and grade.sh's phases come from its "[grade] PHASE took N s" lines).
#              The table on the stubs fails every task (exit 1): reaching it is the success.
#   --grade-apt-seconds S
#              installing what grade.sh adds to run.sh's packages (GoogleTest), measured apart when
#              this machine has it already (as --apt-seconds is for run.sh's packages).
#   --note T   a sentence the report prints as it is (what else the machine was doing).
#   --runs K   K CI runs in a row, each in its own fresh clone (default 1); every run is recorded,
#              passed or failed, and the script exits 1 if any failed.
#   --busy N   N busy loops (`while :; do :; done`, same priority as the CI) run beside each CI
#              run: the machine deliberately slowed, to prove no test's verdict depends on its
#              speed (issue 59). N = the core count halves the CPU the CI gets.
#   --reruns R, --rerun-busy M
#              R more runs of `CI=true bash .ci/run` in the last fresh clone, its trees, venv and
#              models already made (setup and the builds find nothing to do: the tests again), each
#              beside M busy loops: every test stage rerun on a slowed machine (measured: 18.5 min
#              beside 2 loops, against 34.9 for the fresh run). Recorded as kind "ci_rerun".
# Writes OUT.json and OUT.md (bench/fresh_machine/report.py: command, commit, machine, date; each
# run's stage times from test.sh's stage lines and the slow factor each preset measured; the
# 1-minute load average before, after, and sampled every 10 s during each command (mean and
# max), since other work on the machine stretches every time), and
# the logs to run.log / ci<i>.log under a temporary folder it names.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PYTHONPATH="$root/bench${PYTHONPATH:+:$PYTHONPATH}"  # the benchmark toolkit, liobench, for any python3
command="bench/fresh_machine/measure.sh"
for a in "$@"; do [[ "$a" =~ [[:space:]] ]] && command+=" \"$a\"" || command+=" $a"; done  # --note's sentence quoted
out="$root/bench/results/fresh_machine_cpu"
skip_run=0 skip_ci=0 runs=1 busy=0 reruns=0 rerun_busy=0 apt_seconds="" grade_apt_seconds="" grade="" note=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --skip-run) skip_run=1 ;;
    --skip-ci) skip_ci=1 ;;
    --grade) grade="$2"; shift ;;
    --note) note="$2"; shift ;;
    --runs) runs="$2"; shift ;;
    --busy) busy="$2"; shift ;;
    --reruns) reruns="$2"; shift ;;
    --rerun-busy) rerun_busy="$2"; shift ;;
    --apt-seconds) apt_seconds="$2"; shift ;;
    --grade-apt-seconds) grade_apt_seconds="$2"; shift ;;
    --out) out="$2"; shift ;;
    *) echo "measure.sh: unknown flag $1" >&2; exit 2 ;;
  esac
  shift
done
work="$(mktemp -d)"
echo "measure: clones and logs in $work"
# The clones hold HEAD as committed: that is the commit the results name, whatever this checkout
# has changed since (results_meta.git_commit takes LIO_COMMIT as given).
export LIO_COMMIT="$(git -C "$root" rev-parse --short HEAD)"
records="$work/records.jsonl"
: >"$records"
# The 1-minute load average now, for the records: another job on the machine shows here.
load() { cut -d' ' -f1 /proc/loadavg; }
# load_watch_start / load_watch_stop: the load average every 10 s in between, printed as the JSON
# fields "load_before", "load_mean", "load_max" and "load_after" (a record's last fields).
load_watch_start() {
  load_before=$(load)
  (while :; do load; sleep 10; done) >"$work/load.txt" &
  load_watcher=$!
}
load_watch_stop() {
  kill "$load_watcher" 2>/dev/null || true
  wait "$load_watcher" 2>/dev/null || true
  python3 - "$work/load.txt" "$load_before" "$(load)" <<'PY'
import statistics, sys
xs = [float(x) for x in open(sys.argv[1]).read().split()] or [float(sys.argv[2])]
print(f'"load_before": {sys.argv[2]}, "load_mean": {statistics.mean(xs):.2f}, "load_max": {max(xs):.2f}, "load_after": {sys.argv[3]}')
PY
}

# ---- scripts/run.sh in a fresh clone ------------------------------------------------------------
if ((!skip_run)); then
  git clone -q "$root" "$work/run"
  load_watch_start
  t0=$(date +%s.%N)
  (cd "$work/run" && bash scripts/run.sh --max-tokens 32) >"$work/run.log" 2>&1
  t1=$(date +%s.%N)
  run_s=$(python3 -c "print(round($t1 - $t0, 1))")
  echo "measure: scripts/run.sh answered after $run_s s"
  printf '{"kind": "run_sh", "seconds": %s, "log": "%s", %s}\n' "$run_s" "$work/run.log" "$(load_watch_stop)" >>"$records"
  if [[ -n "$grade" ]]; then
    load_watch_start
    t0=$(date +%s.%N)
    rc=0
    (cd "$work/run" && bash scripts/grade.sh "$grade") >"$work/grade.log" 2>&1 || rc=$?
    t1=$(date +%s.%N)
    grade_s=$(python3 -c "print(round($t1 - $t0, 1))")
    echo "measure: scripts/grade.sh $grade exited $rc after $grade_s s"
    printf '{"kind": "grade_sh", "chapter": "%s", "seconds": %s, "exit_code": %d, "log": "%s", %s}\n' \
      "$grade" "$grade_s" "$rc" "$work/grade.log" "$(load_watch_stop)" >>"$records"
  fi
  rm -rf "$work/run"
fi

# ---- CI=true bash .ci/run, each run in another fresh clone, optionally beside busy loops ----------
loops=()
# A killed loop's wait answers 143: under set -e that must not end the script (it did, after the
# first slowed rerun).
stop_loops() {
  if ((${#loops[@]})); then
    kill "${loops[@]}" 2>/dev/null || true
    wait "${loops[@]}" 2>/dev/null || true
  fi
  loops=()
}
trap stop_loops EXIT
failed=0
if ((!skip_ci)); then
  # One CI run in CLONE beside N busy loops, recorded as KIND (ci / ci_rerun) number I.
  ci_once() {
    local kind=$1 i=$2 n=$3 clone=$4 log=$5 b t0 t1 rc=0 ci_s speeds
    load_watch_start
    for ((b = 0; b < n; b++)); do
      bash -c 'while :; do :; done' &
      loops+=($!)
    done
    t0=$(date +%s.%N)
    (cd "$clone" && CI=true bash .ci/run) >"$log" 2>&1 || rc=$?
    t1=$(date +%s.%N)
    stop_loops
    ci_s=$(python3 -c "print(round($t1 - $t0, 1))")
    echo "measure: $kind $i ($n busy loops beside it) exited $rc after $ci_s s"
    ((rc == 0)) || failed=1
    # Each preset's calibration record (tests/support/machine_speed.py).
    speeds=$(python3 - "$clone" <<'PY'
import glob, json, os, sys
out = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "build*", "tests", "machine_speed.json"))):
    r = json.load(open(f))
    out[f.split(os.sep)[-3]] = {k: r.get(k) for k in ("step_ms", "reference_step_ms", "slow_factor")}
print(json.dumps(out))
PY
)
    printf '{"kind": "%s", "run": %d, "seconds": %s, "exit_code": %d, "busy_loops": %d, "log": "%s", "machine_speed": %s, %s}\n' \
      "$kind" "$i" "$ci_s" "$rc" "$n" "$log" "$speeds" "$(load_watch_stop)" >>"$records"
  }
  for ((i = 1; i <= runs; i++)); do
    clone="$work/ci$i"
    git clone -q "$root" "$clone"
    ci_once ci "$i" "$busy" "$clone" "$work/ci$i.log"
    if ((i == runs)); then
      for ((j = 1; j <= reruns; j++)); do
        ci_once ci_rerun "$j" "$rerun_busy" "$clone" "$work/ci$i-rerun$j.log"
      done
    fi
    rm -rf "$clone"
  done
fi

python3 "$root/bench/fresh_machine/report.py" --records "$records" --out "$out" --command "$command" \
  ${apt_seconds:+--apt-seconds "$apt_seconds"} ${grade_apt_seconds:+--grade-apt-seconds "$grade_apt_seconds"} \
  ${note:+--note "$note"}
exit "$failed"
