#!/usr/bin/env python3
"""check_exercise_leaks.py — no stub, header or lesson hands a learner the answer (issue 61).

Each chapter's reference solution lists, per graded task, the key expressions of its answer in
solutions/<chapter>/leak_keys.json:

    {"lesson": "docs/05_continuous_batching.md",
     "tasks": [{"task": 1, "stub": "exercises/05_continuous_batching/schedule_step.cpp",
                "function": "schedule_step", "core": true,
                "keys": ["free_blocks - watermark", "num_new_tokens <= token_budget"]}]}

For every task this fails when a key appears (whitespace ignored, so `a/b` matches `a / b`) in:
  - the stub file itself (its code, comments and the error message grade.sh prints),
  - every project header the stub includes (`#include "..."`, resolved under common/, kernels/,
    chapters/, exercises/; system and third-party headers are not ours to blame),
  - the lesson's section for the task (`### Task K -> ...` up to the next heading).
A key is a fragment of the reference answer, not a word: pick what transcribing would copy (an
update rule, a predicate, a formula), at least 8 characters.

Each task also says what in LIO runs the learner's code ("runs": the engine's operator, tool or
program that calls it; tests do not count) and whether it is the chapter's core ("core"). The
rule for core: the task is the chapter's technique itself, the code that does the optimization
each time the engine, a tool or the chapter's program applies it (a cache write, a quantizer, an
address translation, an attention kernel, a scheduling decision, a drafter, an all-reduce, a
serving turn). Not core: arithmetic about the technique (bytes, counts, speedups, the slice a
rank holds, the KV head a query head reads), a predicate a core task calls, and serving plumbing
that is not inference optimization (SSE framing, latency metrics, request validation). Every
task needs a "runs" (code nothing runs is an exercise about the engine, not a part of it); the
CUDA kernel exercises (chapters 03, 04, 07) name their given launcher, on a GPU, off the
engine's own GPU path.

    python3 scripts/check_exercise_leaks.py            check every chapter (exit 1 on a leak; 2 when an
                                                       exercises/ chapter has no key file)
    python3 scripts/check_exercise_leaks.py --partial  only the chapters that have a key file
    python3 scripts/check_exercise_leaks.py --self-test  proves the check fails on a fixture leak
    python3 scripts/check_exercise_leaks.py --table    the tasks as a Markdown table (reference
                                                       lines, core or not), for notes and lessons
Exit status: 0 clean, 1 a leak (each printed as task, key, file:line), 2 a malformed key file.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INCLUDE_ROOTS = ("common", "kernels", "chapters", "exercises")
MIN_KEY_CHARS = 8
REQUIRE_RUNS = True


def squash(text: str) -> str:
    """`text` without whitespace: the form keys are compared in."""
    return re.sub(r"\s+", "", text)


def header_index() -> dict[str, list[Path]]:
    """Every project header by its path suffixes ("lio/engine.h", "engine.h"), build trees excluded."""
    index: dict[str, list[Path]] = {}
    for top in INCLUDE_ROOTS:
        for path in (ROOT / top).rglob("*"):
            if path.suffix not in (".h", ".hpp", ".cuh") or not path.is_file():
                continue
            parts = path.relative_to(ROOT).parts
            for i in range(len(parts)):
                index.setdefault("/".join(parts[i:]), []).append(path)
    return index


def included_headers(stub: Path, index: dict[str, list[Path]]) -> list[Path]:
    """The project headers `stub` includes directly."""
    found: list[Path] = []
    for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', stub.read_text(), flags=re.M):
        for path in index.get(name, []):
            if path not in found:
                found.append(path)
    return found


def lesson_section(lesson: Path, task: int) -> tuple[int, list[str]]:
    """(first line number, lines) of the lesson's `### Task K` section, up to the next heading."""
    lines = lesson.read_text().splitlines()
    start = None
    for i, line in enumerate(lines):
        if start is None and re.match(rf"^###\s+Task\s+{task}\b", line):
            start = i
        elif start is not None and re.match(r"^#{1,3}\s", line):
            return start + 1, lines[start:i]
    if start is None:
        return 0, []
    return start + 1, lines[start:]


def find_key(key: str, lines: list[str], first_line: int) -> list[int]:
    """Line numbers (first_line-based) where `key` starts; a key may span up to four lines (a
    line's leading `//`, `///` or `//!` is dropped first, so a formula a comment wraps counts)."""
    target = squash(key)
    squashed = [squash(re.sub(r"^\s*//[/!]?", "", line)) for line in lines]
    hits = []
    for i in range(len(lines)):
        for span in range(1, 5):
            if target in "".join(squashed[i:i + span]):
                # It starts on line i unless it already fits in the lines after i.
                if span == 1 or target not in "".join(squashed[i + 1:i + span]):
                    hits.append(first_line + i)
                break
    return hits


def load_chapters() -> list[tuple[Path, dict]]:
    chapters = []
    for path in sorted((ROOT / "solutions").glob("*/leak_keys.json")):
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise SystemExit(f"check_exercise_leaks: {path.relative_to(ROOT)}: not JSON: {e}") from None
        chapters.append((path, data))
    return chapters


def validate(path: Path, data: dict) -> list[str]:
    errors = []
    rel = path.relative_to(ROOT)
    if not (ROOT / data.get("lesson", "")).is_file():
        errors.append(f"{rel}: lesson {data.get('lesson')!r} is not a file")
    lesson = ROOT / data.get("lesson", "")
    if lesson.is_file():  # every graded task of the lesson has keys
        listed = {t.get("task") for t in data.get("tasks", [])}
        for task in sorted({int(k) for k in re.findall(r"^###\s+Task\s+(\d+)\b", lesson.read_text(), flags=re.M)}):
            if task not in listed:
                errors.append(f"{rel}: the lesson's Task {task} has no entry")
    for t in data.get("tasks", []):
        where = f"{rel} task {t.get('task')}"
        if not isinstance(t.get("task"), int):
            errors.append(f"{where}: 'task' must be a number")
        if not (ROOT / t.get("stub", "")).is_file():
            errors.append(f"{where}: stub {t.get('stub')!r} is not a file")
        if not isinstance(t.get("core"), bool):
            errors.append(f"{where}: 'core' must be true or false")
        if REQUIRE_RUNS and (not isinstance(t.get("runs"), str) or not t.get("runs", "").strip()):
            errors.append(f"{where}: 'runs' must say what in LIO runs the learner's code (an operator, a tool, "
                          "a program; tests do not count)")
        keys = t.get("keys", [])
        if not keys:
            errors.append(f"{where}: no keys")
        for k in keys:
            if len(squash(k)) < MIN_KEY_CHARS:
                errors.append(f"{where}: key {k!r} is shorter than {MIN_KEY_CHARS} characters: it would match by chance")
        solution = ROOT / t.get("stub", "").replace("exercises/", "solutions/", 1)
        if solution.is_file():
            text = squash(solution.read_text())
            for k in keys:
                if squash(k) not in text:
                    errors.append(f"{where}: key {k!r} is not in the reference {solution.relative_to(ROOT)}")
    return errors


def reference_lines(stub: str, function: str | None) -> int | str:
    """Non-blank, non-comment lines of the reference solution's file (or of `function` in it)."""
    solution = ROOT / stub.replace("exercises/", "solutions/", 1)
    if not solution.is_file():
        return "?"
    lines = solution.read_text().splitlines()
    if function:
        start = next((i for i, l in enumerate(lines) if re.search(rf"\b{re.escape(function)}\s*\(", l)
                      and not l.rstrip().endswith(";")), None)
        if start is not None:
            depth, body = 0, []
            for line in lines[start:]:
                body.append(line)
                depth += line.count("{") - line.count("}")
                if depth == 0 and "{" in "".join(body):
                    break
            lines = body
    return sum(1 for l in lines if l.strip() and not l.strip().startswith("//"))


def self_test() -> int:
    """A fixture chapter in a temporary tree: clean, the check passes; the key put in the stub's
    message, in a header the stub includes, or in the lesson's Task section, it fails naming that
    file; a key missing from the reference is a malformed key file (exit 2)."""
    import shutil
    import subprocess
    import tempfile
    key = "m_new = max(m, s)"

    def tree(where: str) -> Path:
        root = Path(tempfile.mkdtemp(prefix="leaks_"))
        for d in ("exercises/99_x", "solutions/99_x", "common/x/include/lio", "docs"):
            (root / d).mkdir(parents=True)
        header = "/// The running maximum after the tile." + (f" {key}" if where == "header" else "") + "\n"
        (root / "common/x/include/lio/x.h").write_text(header + "float update(float m, float s);\n")
        message = "Task 1 (exercises/99_x/x.cpp): update" + (f" {key}" if where == "stub" else "")
        (root / "exercises/99_x/x.cpp").write_text(
            '#include "lio/x.h"\nfloat update(float m, float s) { throw "' + message + '"; }\n')
        (root / "solutions/99_x/x.cpp").write_text(
            '#include "lio/x.h"\nfloat update(float m, float s) {\n  float m_new = max(m, s);\n  return m_new;\n}\n')
        lesson = "# 99\n\n### Task 1 -> `exercises/99_x/x.cpp`\n\nThe running maximum.\n"
        if where == "lesson":
            lesson += f"Write {key}.\n"
        (root / "docs/99_x.md").write_text(lesson + "\n## Readings\n")
        keys = [key] if where != "malformed" else ["not in the reference at all"]
        (root / "solutions/99_x/leak_keys.json").write_text(json.dumps(
            {"lesson": "docs/99_x.md",
             "tasks": [{"task": 1, "stub": "exercises/99_x/x.cpp", "function": "update", "core": True,
                        "runs": "the fixture's program", "keys": keys}]}))
        return root

    failures = []
    for where, want_rc, want_text in (("clean", 0, "0 leak(s)"), ("stub", 1, "exercises/99_x/x.cpp:2"),
                                      ("header", 1, "common/x/include/lio/x.h:1"), ("lesson", 1, "docs/99_x.md:6"),
                                      ("malformed", 2, "not in the reference")):
        root = tree(where)
        run = subprocess.run([sys.executable, __file__, "--root", str(root)], capture_output=True, text=True)
        shutil.rmtree(root, ignore_errors=True)
        out = run.stdout + run.stderr
        ok = run.returncode == want_rc and want_text in out
        print(f"{'ok  ' if ok else 'FAIL'} {where}: exit {run.returncode} (want {want_rc}), "
              f"{'names' if want_text in out else 'does not name'} {want_text!r}")
        if not ok:
            failures.append(where)
            print(out)
    return 1 if failures else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", action="store_true", help="print the tasks as a Markdown table")
    ap.add_argument("--partial", action="store_true", help="check only the chapters that have a key file")
    ap.add_argument("--root", type=Path, help="check this tree instead of the repository (tests)")
    ap.add_argument("--self-test", action="store_true",
                    help="prove the check fails: a fixture tree with a leak in a stub, a header and a lesson")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if args.root:
        global ROOT
        ROOT = args.root.resolve()
    chapters = load_chapters()
    missing = [d.name for d in sorted((ROOT / "exercises").iterdir())
               if d.is_dir() and not (ROOT / "solutions" / d.name / "leak_keys.json").is_file()]
    if missing and not args.partial:
        print("check_exercise_leaks: no solutions/<chapter>/leak_keys.json for " + ", ".join(missing) +
              " (--partial checks the chapters that have one)", file=sys.stderr)
        return 2
    if not chapters:
        print("check_exercise_leaks: no solutions/*/leak_keys.json", file=sys.stderr)
        return 2
    errors = [e for path, data in chapters for e in validate(path, data)]
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 2
    if args.table:
        print("| chapter | task | stub | function | reference lines | core | what runs it |")
        print("|---|---:|---|---|---:|---|---|")
        n_core = n_all = 0
        for path, data in chapters:
            for t in data["tasks"]:
                n_all += 1
                n_core += t["core"]
                print(f"| {path.parent.name} | {t['task']} | `{t['stub']}` | {t.get('function', '')} | "
                      f"{reference_lines(t['stub'], t.get('function'))} | {'yes' if t['core'] else 'no'} | "
                      f"{t.get('runs', '')} |")
        print(f"\n{n_core} of {n_all} tasks are a chapter's core algorithm.")
        return 0
    index = header_index()
    leaks = []
    n_tasks = 0
    for path, data in chapters:
        lesson = ROOT / data["lesson"]
        for t in data["tasks"]:
            n_tasks += 1
            stub = ROOT / t["stub"]
            sources: list[tuple[Path, int, list[str]]] = [(stub, 1, stub.read_text().splitlines())]
            for header in included_headers(stub, index):
                sources.append((header, 1, header.read_text().splitlines()))
            first, section = lesson_section(lesson, t["task"])
            if not section:
                leaks.append(f"{path.parent.name} task {t['task']}: no '### Task {t['task']}' section in {data['lesson']}")
            sources.append((lesson, first, section))
            for key in t["keys"]:
                for source, first_line, lines in sources:
                    for line in find_key(key, lines, first_line):
                        leaks.append(f"{path.parent.name} task {t['task']}: {key!r} in "
                                     f"{source.relative_to(ROOT)}:{line}")
    for leak in leaks:
        print(leak)
    print(f"check_exercise_leaks: {n_tasks} tasks, {len(chapters)} chapters, {len(leaks)} leak(s)")
    return 1 if leaks else 0


if __name__ == "__main__":
    sys.exit(main())
