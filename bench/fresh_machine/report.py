#!/usr/bin/env python3
"""Writes bench/fresh_machine/measure.sh's results: OUT.json and OUT.md.

measure.sh appends one JSON line per measured command to a records file:
    {"kind": "run_sh", "seconds": S, "log": PATH}
    {"kind": "ci", "run": I, "seconds": S, "exit_code": RC, "busy_loops": N, "log": PATH,
     "machine_speed": {"build": {"tpot_ms": T, "slow_factor": F}, ...}}
This script reads them and each log: test.sh prints "=== STAGE (HH:MM:SS)" as each stage starts,
so a stage's time is the gap to the next mark; setup.sh prints "[setup] PHASE took N s" after its
packages, venv and models, and "[setup] built in N s" (since its start) after the build. The
results carry the provenance every results file does (bench/common/results_meta.py) and no
local path.

    report.py --records FILE --out PREFIX --command "bench/fresh_machine/measure.sh ..." [--apt-seconds S]
"""
import argparse
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "common"))
import results_meta  # noqa: E402

STAGE = re.compile(r"^=== (.*) \((\d\d):(\d\d):(\d\d)\)$")


def stages(log_path):
    """[{"stage", "seconds"}] from test.sh's stage lines; the last mark ("all tests passed ...")
    only ends the stage before it."""
    marks = []
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = STAGE.match(line.rstrip())
            if m:
                marks.append((m.group(1), int(m.group(2)) * 3600 + int(m.group(3)) * 60 + int(m.group(4))))
    return [{"stage": name, "seconds": (nxt[1] - t) % 86400} for (name, t), nxt in zip(marks, marks[1:])]


def failure_lines(log_path, n=12):
    """The lines of a failed run's log that say what failed (ctest's list, FAIL lines)."""
    keep = []
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if re.search(r"\(Failed\)|\(Timeout\)|\bFAIL\b|FAILED|Error ", line):
                keep.append(results_meta.local_path_free(line.rstrip()))
    return keep[-n:]


def setup_build_seconds(log_path):
    with open(log_path, encoding="utf-8", errors="replace") as f:
        found = re.findall(r"^\[setup\] built in (\d+) s", f.read(), re.M)
    return int(found[-1]) if found else None


def setup_phases(log_path):
    """[{"phase", "seconds"}]: setup.sh's "[setup] PHASE took N s" lines (packages, venv, models,
    build; the venv and the models run beside the build and say so after the seconds)."""
    with open(log_path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return [{"phase": f"{phase} {rest.strip()}".strip(), "seconds": int(seconds)}
            for phase, seconds, rest in re.findall(r"^\[setup\] (.+?) took (\d+) s(.*)$", text, re.M)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--apt-seconds", type=float)
    a = ap.parse_args()
    records = [json.loads(line) for line in open(a.records) if line.strip()]
    data = {"what": "wall time a newcomer waits on a fresh clone (no build/, models/ or .venv/)",
            "provenance": results_meta.provenance(a.command), "apt_install_seconds": a.apt_seconds}
    # Flat fields the README renders (run_sh_seconds, ci_seconds, apt_install_seconds).
    data["command"], data["commit"] = data["provenance"]["command"], data["provenance"]["commit"]
    data["machine"], data["date"] = data["provenance"]["machine"], data["provenance"]["date"]
    run = next((r for r in records if r["kind"] == "run_sh"), None)
    data["run_sh_seconds"] = run["seconds"] if run else None
    data["run_sh_setup_and_build_seconds"] = setup_build_seconds(run["log"]) if run else None
    runs = []
    for r in (r for r in records if r["kind"] == "ci"):
        runs.append({"run": r["run"], "passed": r["exit_code"] == 0, "exit_code": r["exit_code"],
                     "seconds": r["seconds"], "busy_loops": r["busy_loops"], "stages": stages(r["log"]),
                     "setup_phases": setup_phases(r["log"]),
                     "machine_speed": r["machine_speed"],
                     "failures": [] if r["exit_code"] == 0 else failure_lines(r["log"])})
    data["ci_runs"] = runs
    data["ci_seconds"] = runs[0]["seconds"] if runs else None
    data["ci_passed"] = all(r["passed"] for r in runs) if runs else None
    data["ci_stages"] = runs[0]["stages"] if runs else []
    with open(a.out + ".json", "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")

    m = data["machine"]
    lines = ["# Fresh-machine times", "", *results_meta.provenance_lines(data["provenance"]),
             f"- Memory: {m.get('mem_gib', 'not recorded')} GiB", ""]
    if run:
        lines += [f"`scripts/run.sh` on a fresh clone: the answer printed after **{run['seconds'] / 60:.1f} min** "
                  f"(setup and build of `lio` {data['run_sh_setup_and_build_seconds']} s).", ""]
    if a.apt_seconds is not None:
        lines += [f"Debian packages were already installed; installing the run set on a new machine took "
                  f"{a.apt_seconds} s (measured separately).", ""]
    if runs:
        busy = runs[0]["busy_loops"]
        lines += [f"`CI=true bash .ci/run` on a fresh clone, {len(runs)} run(s) in a row"
                  + (f", each beside {busy} busy loop(s) at the same priority (the machine deliberately slowed)"
                     if busy else ", nothing else running") + ":", "",
                  "| run | result | wall time | slow factor measured (default / asan / tsan) |", "|---|---|---:|---|"]
        for r in runs:
            sf = " / ".join(f"{r['machine_speed'].get(b, {}).get('slow_factor', '-')}"
                            for b in ("build", "build-asan", "build-tsan"))
            lines.append(f"| {r['run']} | {'passed' if r['passed'] else 'FAILED'} | {r['seconds'] / 60:.1f} min | {sf} |")
        if len(runs) > 1:
            secs = [r["seconds"] for r in runs]
            lines += ["", f"Median {statistics.median(secs) / 60:.1f} min, range {min(secs) / 60:.1f}-{max(secs) / 60:.1f} min."]
        for r in runs:
            if r["failures"]:
                lines += ["", f"Run {r['run']} failed:", "", "```", *r["failures"], "```"]
        names = [s["stage"] for s in runs[0]["stages"]]
        lines += ["", "| CI stage | " + " | ".join(f"run {r['run']} (s)" for r in runs) + " |",
                  "|---|" + "---:|" * len(runs)]
        for i, name in enumerate(names):
            cells = [str(r["stages"][i]["seconds"]) if i < len(r["stages"]) else "-" for r in runs]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        if runs[0]["setup_phases"]:
            lines += ["", "The first stage, setup + build, by phase (run 1): " + ", ".join(
                f"{p['phase']} {p['seconds']} s" for p in runs[0]["setup_phases"]) + "."]
        refs = sorted({s.get("reference_step_ms") for r in runs for s in r["machine_speed"].values()} - {None})
        lines += ["", "The slow factor is the decode step (16 sampled sequences at once) each preset's `lio` measured at the start of its tests "
                  "(tests/support/machine_speed.py, under OMP_WAIT_POLICY=passive as ctest runs them) over the "
                  f"{' / '.join(f'{x:g}' for x in refs) or '(not recorded)'} ms the tests' waits were written for, "
                  "never below 1; every clock-bound test multiplies its waits by it."]
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("report: wrote", results_meta.local_path_free(a.out + ".json"), "and",
          results_meta.local_path_free(a.out + ".md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
