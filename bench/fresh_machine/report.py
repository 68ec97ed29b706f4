#!/usr/bin/env python3
"""Writes bench/fresh_machine/measure.sh's results: OUT.json and OUT.md.

measure.sh appends one JSON line per measured command to a records file:
    {"kind": "run_sh", "seconds": S, "log": PATH}
    {"kind": "ci", "run": I, "seconds": S, "exit_code": RC, "busy_loops": N, "log": PATH,
     "machine_speed": {"build": {"step_ms": T, "reference_step_ms": R, "slow_factor": F}, ...}}
    {"kind": "ci_rerun", ...the same fields}: .ci/run again in the last fresh clone (built)
    {"kind": "grade_sh", "chapter": NN, "seconds": S, "exit_code": RC, "log": PATH}: scripts/grade.sh NN
     in run.sh's clone right after it (measure.sh --grade NN)
Each record also has "load_before", "load_mean", "load_max" and "load_after": the 1-minute load
average before it, sampled every 10 s while it ran, and after it.
This script reads them and each log: test.sh prints "=== STAGE (HH:MM:SS)" as each stage starts,
so a stage's time is the gap to the next mark; setup.sh prints "[setup] PHASE took N s" after its
packages, venv and models, and "[setup] built in N s" (since its start) after the build. The
results carry the provenance every results file does (bench/liobench/results_meta.py) and no
local path.

    report.py --records FILE --out PREFIX --command "bench/fresh_machine/measure.sh ..." [--apt-seconds S]
"""
import argparse
import json
import re
import statistics
import sys

from liobench import flags, results_meta


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
    return phases(log_path, "setup")


def phases(log_path, tag):
    """[{"phase", "seconds"}] from a script's "[TAG] PHASE took N s" lines (setup.sh, grade.sh)."""
    with open(log_path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return [{"phase": f"{phase} {rest.strip()}".strip(), "seconds": int(seconds)}
            for phase, seconds, rest in re.findall(rf"^\[{tag}\] (.+?) took (\d+) s(.*)$", text, re.M)]


def load_average(record):
    """The 1-minute load average around and during a measured command (measure.sh's records)."""
    return {k: record.get(f"load_{k}") for k in ("before", "mean", "max", "after")}


def grade_summary(record):
    """What scripts/grade.sh NN printed on the fresh clone: its phases, the build's step count, and
    whether it reached the graded table (its "score: P / T tasks" line; on the stubs P is 0)."""
    with open(record["log"], encoding="utf-8", errors="replace") as f:
        text = f.read()
    steps = re.findall(r"^\[grade\] build took (\d+) s \((\d+) steps\)", text, re.M)
    score = re.findall(r"^score: (\d+) / (\d+) tasks", text, re.M)
    return {"chapter": record["chapter"], "seconds": record["seconds"], "exit_code": record["exit_code"],
            "reached_table": bool(score), "tasks_passed": int(score[-1][0]) if score else None,
            "tasks": int(score[-1][1]) if score else None,
            "phases": [{"phase": re.sub(r" \(\d+ steps\)$", "", p["phase"]), "seconds": p["seconds"]}
                       for p in phases(record["log"], "grade")],
            "build_seconds": int(steps[-1][0]) if steps else None,
            "build_steps": int(steps[-1][1]) if steps else None,
            "load_average": load_average(record),
            "failures": [] if score else failure_lines(record["log"])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", required=True)
    flags.add_out(ap)
    ap.add_argument("--command", required=True)
    ap.add_argument("--apt-seconds", type=float)
    ap.add_argument("--grade-apt-seconds", type=float,
                    help="installing what grade.sh adds to run.sh's packages (GoogleTest), measured apart")
    ap.add_argument("--note", help="a sentence printed as it is: what else the machine was doing")
    a = ap.parse_args()
    records = [json.loads(line) for line in open(a.records) if line.strip()]
    data = {"what": "wall time a newcomer waits on a fresh clone (no build/, models/ or .venv/)",
            "provenance": results_meta.provenance(a.command), "apt_install_seconds": a.apt_seconds,
            "grade_apt_install_seconds": a.grade_apt_seconds, "note": a.note}
    # Flat fields the README renders (run_sh_seconds, ci_seconds, apt_install_seconds).
    data["command"], data["commit"] = data["provenance"]["command"], data["provenance"]["commit"]
    data["machine"], data["date"] = data["provenance"]["machine"], data["provenance"]["date"]
    run = next((r for r in records if r["kind"] == "run_sh"), None)
    data["run_sh_seconds"] = run["seconds"] if run else None
    data["run_sh_setup_and_build_seconds"] = setup_build_seconds(run["log"]) if run else None
    data["run_sh_load_average"] = load_average(run) if run else None
    # Flat fields the README and scripts/grade.sh's first-build estimate read.
    grade_rec = next((r for r in records if r["kind"] == "grade_sh"), None)
    grade = grade_summary(grade_rec) if grade_rec else None
    data["grade"] = grade
    data["grade_chapter"] = grade["chapter"] if grade else None
    data["grade_sh_seconds"] = grade["seconds"] if grade else None
    data["grade_build_seconds"] = grade["build_seconds"] if grade else None
    data["grade_build_steps"] = grade["build_steps"] if grade else None
    data["run_to_graded_table_seconds"] = (round(run["seconds"] + grade["seconds"], 1)
                                           if run and grade and grade["reached_table"] else None)
    # On a machine without GoogleTest, grade.sh installs it first: add that install, measured apart.
    data["run_to_graded_table_new_machine_seconds"] = (
        round(data["run_to_graded_table_seconds"] + (a.apt_seconds or 0) + (a.grade_apt_seconds or 0), 1)
        if data["run_to_graded_table_seconds"] is not None and a.grade_apt_seconds is not None else None)
    def ci_records(kind):
        return [{"run": r["run"], "passed": r["exit_code"] == 0, "exit_code": r["exit_code"],
                 "seconds": r["seconds"], "busy_loops": r["busy_loops"], "stages": stages(r["log"]),
                 "setup_phases": setup_phases(r["log"]),
                 "machine_speed": r["machine_speed"],
                 "load_average": load_average(r),
                 "failures": [] if r["exit_code"] == 0 else failure_lines(r["log"])}
                for r in records if r["kind"] == kind]
    runs, reruns = ci_records("ci"), ci_records("ci_rerun")
    data["ci_runs"] = runs
    data["ci_reruns"] = reruns
    data["ci_reruns_passed"] = all(r["passed"] for r in reruns) if reruns else None
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
    if grade:
        g = grade
        phase_text = ", ".join(f"{p['phase']} {p['seconds']} s" for p in g["phases"])
        if g["reached_table"]:
            lines += [f"Then `scripts/grade.sh {g['chapter']}` in the same clone printed its graded table "
                      f"({g['tasks_passed']} / {g['tasks']} tasks pass on the stubs) after **{g['seconds'] / 60:.1f} min** "
                      f"({phase_text}; the build ran {g['build_steps']} steps): from the clone to the first graded "
                      f"table **{data['run_to_graded_table_seconds'] / 60:.1f} min**.", ""]
        else:
            lines += [f"Then `scripts/grade.sh {g['chapter']}` in the same clone did NOT reach its table "
                      f"(exit {g['exit_code']} after {g['seconds']:.0f} s):", "", "```", *g["failures"], "```", ""]
    loads = [(label, r) for label, r in (("`scripts/run.sh`", run), (f"`scripts/grade.sh {grade['chapter']}`" if grade else "", grade_rec))
             if r and r.get("load_before") is not None]
    loads += [(f"CI {r['kind']} {r['run']}", r) for r in records if r["kind"].startswith("ci") and r.get("load_before") is not None]
    if loads:
        def during(r):
            return (f", {r['load_mean']} mean and {r['load_max']} max during it (every 10 s)"
                    if r.get("load_mean") is not None else "")
        lines += [f"The 1-minute load average around each command, on the machine's {m.get('cores', '?')} cores "
                  "(what it adds beyond the command's own jobs is other work on the machine): "
                  + "; ".join(f"{label} {r['load_before']} before{during(r)}, {r['load_after']} after"
                              for label, r in loads) + ".", ""]
    if a.grade_apt_seconds is not None and data["run_to_graded_table_new_machine_seconds"] is not None:
        lines += [f"GoogleTest was already installed here; on a machine without it grade.sh installs it first "
                  f"(apt-get update, then libgtest-dev and googletest), measured apart at {a.grade_apt_seconds} s. "
                  f"With it" + (" and run.sh's packages (below)" if a.apt_seconds is not None else "")
                  + f", from the clone to the first graded table on a new machine: "
                  f"**{data['run_to_graded_table_new_machine_seconds'] / 60:.1f} min**.", ""]
    if a.note:
        lines += [a.note, ""]
    if a.apt_seconds is not None:
        lines += [f"Debian packages were already installed; installing the run set on a new machine took "
                  f"{a.apt_seconds} s (measured separately).", ""]
    def runs_table(rs, label):
        """The run table, failures and per-stage table of one list of CI records."""
        out = ["| run | result | wall time | slow factor measured (default / asan / tsan) |", "|---|---|---:|---|"]
        for r in rs:
            sf = " / ".join(f"{r['machine_speed'].get(b, {}).get('slow_factor', '-')}"
                            for b in ("build", "build-asan", "build-tsan"))
            out.append(f"| {label} {r['run']} | {'passed' if r['passed'] else 'FAILED'} | {r['seconds'] / 60:.1f} min | {sf} |")
        if len(rs) > 1:
            secs = [r["seconds"] for r in rs]
            out += ["", f"Median {statistics.median(secs) / 60:.1f} min, range {min(secs) / 60:.1f}-{max(secs) / 60:.1f} min."]
        for r in rs:
            if r["failures"]:
                out += ["", f"{label.capitalize()} {r['run']} failed:", "", "```", *r["failures"], "```"]
        names = [st["stage"] for st in rs[0]["stages"]]
        out += ["", "| CI stage | " + " | ".join(f"{label} {r['run']} (s)" for r in rs) + " |",
                "|---|" + "---:|" * len(rs)]
        for i, name in enumerate(names):
            cells = [str(r["stages"][i]["seconds"]) if i < len(r["stages"]) else "-" for r in rs]
            out.append(f"| {name} | " + " | ".join(cells) + " |")
        return out

    if runs:
        busy = runs[0]["busy_loops"]
        lines += [f"`CI=true bash .ci/run` on a fresh clone, {len(runs)} run(s) in a row"
                  + (f", each beside {busy} busy loop(s) at the same priority (the machine deliberately slowed)"
                     if busy else ", nothing else running") + ":", "", *runs_table(runs, "run")]
        if runs[0]["setup_phases"]:
            lines += ["", "The first stage, setup + build, by phase (run 1): " + ", ".join(
                f"{p['phase']} {p['seconds']} s" for p in runs[0]["setup_phases"]) + "."]
    if reruns:
        rbusy = reruns[0]["busy_loops"]
        lines += ["", f"Then `CI=true bash .ci/run` {len(reruns)} more time(s) in a row in run {runs[-1]['run']}'s clone "
                  "(its venv, models and build trees made: setup and the builds find little to do, every test runs again)"
                  + (f", each beside {rbusy} busy loop(s) `while :; do :; done` at the same priority: the machine deliberately "
                     "slowed, to show no test's verdict depends on its speed" if rbusy else "") + ":", "",
                  *runs_table(reruns, "rerun")]
    if runs or reruns:
        refs = sorted({s.get("reference_step_ms") for r in runs + reruns for s in r["machine_speed"].values()} - {None})
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
