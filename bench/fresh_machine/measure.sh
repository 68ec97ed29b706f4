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
# Usage: bench/fresh_machine/measure.sh [--skip-ci] [--apt-seconds S] [--out bench/results/fresh_machine_cpu]
# Writes OUT.json and OUT.md (command, commit, machine, date; stage times from the scripts' own
# stage lines), and the logs to OUT.run.log / OUT.ci.log under a temporary folder it names.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
command="bench/fresh_machine/measure.sh${*:+ $*}"
out="$root/bench/results/fresh_machine_cpu"
skip_ci=0
apt_seconds=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --skip-ci) skip_ci=1 ;;
    --apt-seconds) apt_seconds="$2"; shift ;;
    --out) out="$2"; shift ;;
    *) echo "measure.sh: unknown flag $1" >&2; exit 2 ;;
  esac
  shift
done
work="$(mktemp -d)"
echo "measure: clones and logs in $work"
commit="$(git -C "$root" rev-parse --short HEAD)"

# ---- scripts/run.sh in a fresh clone ------------------------------------------------------------
git clone -q "$root" "$work/run"
t0=$(date +%s.%N)
(cd "$work/run" && bash scripts/run.sh --max-tokens 32) >"$work/run.log" 2>&1
t1=$(date +%s.%N)
run_s=$(python3 -c "print(round($t1 - $t0, 1))")
run_build_s=$(sed -n 's/^\[setup\] built in \([0-9]*\) s.*/\1/p' "$work/run.log" | tail -1)
echo "measure: scripts/run.sh answered after $run_s s (setup + build $run_build_s s)"

# ---- CI=true bash .ci/run in another fresh clone ---------------------------------------------------
ci_s=""
stages_json="[]"
if ((!skip_ci)); then
  git clone -q "$root" "$work/ci"
  t0=$(date +%s.%N)
  (cd "$work/ci" && CI=true bash .ci/run) >"$work/ci.log" 2>&1
  t1=$(date +%s.%N)
  ci_s=$(python3 -c "print(round($t1 - $t0, 1))")
  echo "measure: CI=true bash .ci/run passed after $ci_s s"
  # test.sh prints "=== STAGE (HH:MM:SS)" at each stage start.
  stages_json=$(python3 - "$work/ci.log" <<'PY'
import json, re, sys, datetime
marks = []
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    m = re.match(r"^=== (.*) \((\d\d):(\d\d):(\d\d)\)$", line.rstrip())
    if m:
        marks.append((m.group(1), int(m.group(2)) * 3600 + int(m.group(3)) * 60 + int(m.group(4))))
stages = []
for (name, t), nxt in zip(marks, marks[1:]):
    stages.append({"stage": name, "seconds": (nxt[1] - t) % 86400})
print(json.dumps(stages))
PY
)
fi

cpu_model="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
cores="$(nproc)"
mem_gib="$(free -g | awk '/^Mem:/ {print $2}')"
date_utc="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
python3 - "$out" <<PY
import json, sys
out = sys.argv[1]
data = {
    "what": "wall time a newcomer waits on a fresh clone (no build/, models/ or .venv/)",
    "command": "$command",
    "commit": "$commit",
    "machine": {"cpu": "$cpu_model", "cores": $cores, "memory_gib": $mem_gib, "gpu": "none"},
    "date": "$date_utc",
    "apt_install_seconds": ${apt_seconds:-None},
    "run_sh_seconds": $run_s,
    "run_sh_setup_and_build_seconds": ${run_build_s:-None},
    "ci_seconds": ${ci_s:-None},
    "ci_stages": json.loads('''$stages_json'''),
}
json.dump(data, open(out + ".json", "w"), indent=2)
lines = [
    "# Fresh-machine times",
    "",
    f"Command: \`{data['command']}\` · commit {data['commit']} · {data['machine']['cpu']}, "
    f"{data['machine']['cores']} cores, {data['machine']['memory_gib']} GiB, no GPU · {data['date']}",
    "",
    "| command | until | wall time |",
    "|---|---|---|",
    f"| \`scripts/run.sh\` | the answer is printed | {data['run_sh_seconds'] / 60:.1f} min |",
]
if data["ci_seconds"] is not None:
    lines.append(f"| \`CI=true bash .ci/run\` | all tests passed | {data['ci_seconds'] / 60:.1f} min |")
if data["apt_install_seconds"] is not None:
    lines += ["", f"Debian packages were already installed; installing the run set on a new machine took "
              f"{data['apt_install_seconds']} s (measured separately)."]
if data["ci_stages"]:
    lines += ["", "| CI stage | seconds |", "|---|---|"]
    lines += [f"| {s['stage']} | {s['seconds']} |" for s in data["ci_stages"]]
open(out + ".md", "w").write("\n".join(lines) + "\n")
print("measure: wrote", out + ".json", "and", out + ".md")
PY
