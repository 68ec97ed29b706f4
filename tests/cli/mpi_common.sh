# mpi_common.sh — sourced by tests/cli/mpi_smoke.sh and mpi_netns.sh: a worker rank killed
# mid-generation must end the whole job within seconds. Needs `fail` from the sourcing script.
#
# Every wait here and in those scripts is written for a Release build on an idle 2-core machine and
# multiplied by the slow factor this build measured on this machine (tests/support/machine_speed.py;
# ctest's fixture machine_speed writes the record and passes its path as LIO_MACHINE_SPEED; absent,
# the factor is 1).
slow_factor=$(python3 "$(dirname "${BASH_SOURCE[0]}")/../support/machine_speed.py" factor "${LIO_MACHINE_SPEED:-}") ||
  { echo "FAIL: cannot read the slow factor from '${LIO_MACHINE_SPEED:-}'"; exit 1; }
echo "slow factor $slow_factor (every wait below is its idle-machine value x that)"

# scaled SECONDS: SECONDS x the slow factor, rounded up to a whole second.
scaled() {
  awk -v s="$1" -v f="$slow_factor" 'BEGIN { v = s * f; printf "%d\n", (v == int(v)) ? v : int(v) + 1 }'
}

# rank_pid RANK PATTERN: the pid of the process matching PATTERN (pgrep -f) whose
# OMPI_COMM_WORLD_RANK is RANK; empty when there is none yet.
rank_pid() {
  local p
  for p in $(pgrep -f "$2" || true); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then echo "$p"; return; fi
  done
}

# wait_rank RANK PATTERN OUT_FILE: waits (60 s x slow factor at most) until rank RANK runs and
# OUT_FILE has output (tokens flow); prints the rank's pid, or nothing.
wait_rank() {
  local victim="" _
  for _ in $(seq 1 "$(scaled 120)"); do
    sleep 0.5
    victim=$(rank_pid "$1" "$2")
    [[ -n "$victim" && -s "$3" ]] && break
  done
  echo "$victim"
}

# expect_job_ends LAUNCHER_PID PATTERN WHAT: after a worker was killed, the job (LAUNCHER_PID)
# must end non-zero within 10 s (x slow factor) and leave no process matching PATTERN.
expect_job_ends() {
  local launcher=$1 pattern=$2 what=$3 t0=$SECONDS rc left _ limit
  limit=$(scaled 10)
  for _ in $(seq 1 $((limit * 4))); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.25; done
  if kill -0 "$launcher" 2>/dev/null; then
    kill -KILL "$launcher"; pkill -KILL -f "$pattern" || true
    fail "$what: the job was still running $limit s later (a hang)"
  fi
  wait "$launcher"
  rc=$?
  [[ $rc != 0 ]] || fail "$what: the job exited 0"
  left=$(pgrep -f "$pattern" | wc -l)
  [[ $left == 0 ]] || fail "$what: $left rank(s) still running after the job ended"
  echo "ok: $what -> every rank ended (exit $rc) in $((SECONDS - t0)) s"
}
