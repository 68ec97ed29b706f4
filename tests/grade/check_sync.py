#!/usr/bin/env python3
"""Keeps exercises/ and solutions/ in step (COURSE.md, "Exercises and grading"):
1. every chapter directory has the same files in exercises/ and solutions/ (but for
   solutions/NN_topic/leak_keys.json, the reference's key expressions the leak check reads);
2. each pair of files defines the same functions with external linkage (same signatures up to
   parameter names, in any order); the reference may add helpers the stub does not have when
   nothing outside the file can call them (an anonymous namespace, `static`, a `__device__`
   function of the kernel's file);
3. every "Task K -> `path`" in docs/NN_topic.md names a stub file that exists and carries a
   "TODO(Task K)", and every TODO(Task K) in a stub has its "Task K" section in the lesson.
Usage: check_sync.py REPO_ROOT. Exit 1 with one line per problem."""
import os
import re
import sys


def strip_comments_and_strings(src):
    src = re.sub(r"//[^\n]*", "", src)
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', src)


def without_parameter_names(sig):
    """`sig` with each parameter's name (and default) dropped: `f(int64_t l)` -> `f(int64_t)`."""
    end = sig.rfind(")")
    depth, i = 0, end
    while i >= 0:  # the '(' that opens the parameter list
        depth += sig[i] == ")"
        depth -= sig[i] == "("
        if depth == 0:
            break
        i -= 1
    params, cur, depth = [], "", 0
    for c in sig[i + 1:end]:
        depth += c in "<([" 
        depth -= c in ">)]"
        if c == "," and depth == 0:
            params.append(cur)
            cur = ""
        else:
            cur += c
    params.append(cur)
    kept = []
    for prm in params:
        prm = prm.split("=")[0].strip()
        m = re.match(r"^(.*[\s*&>])([A-Za-z_]\w*)$", prm)
        kept.append(m.group(1).strip() if m and m.group(1).strip() not in ("", "const", "unsigned") else prm)
    return sig[:i + 1] + ", ".join(p for p in kept if p) + sig[end:]


def definitions(path, external_only=False):
    """Signatures of the functions defined in `path` (text before each body's `{`), parameter
    names dropped; with external_only, not those nothing outside the file can call (in an
    anonymous namespace, `static`, `__device__`)."""
    src = strip_comments_and_strings(open(path, encoding="utf-8").read())
    sigs, depth_stack, start = [], [], 0
    i = 0
    while i < len(src):
        c = src[i]
        if c == "{":
            head = src[start:i].strip()
            if re.search(r"\bnamespace\s*$", head):
                depth_stack.append("anon")
            elif re.search(r"\bnamespace\b[\w:\s]*$", head) or not depth_stack and not head:
                depth_stack.append("ns")
            elif all(d in ("ns", "anon") for d in depth_stack) and head.endswith(")") or re.search(r"\)\s*const$", head):
                if all(d in ("ns", "anon") for d in depth_stack):
                    sig = " ".join(head.split(";")[-1].split())
                    sig = re.sub(r"^#.*?(?=\S+\s)", "", sig)
                    internal = ("anon" in depth_stack or re.match(r"^(static|inline static)\b", sig) is not None
                                or ("__device__" in sig and "__global__" not in sig))
                    if not (external_only and internal):
                        sigs.append(without_parameter_names(sig))
                depth_stack.append("fn")
            else:
                depth_stack.append("other")
            start = i + 1
        elif c == "}":
            if depth_stack:
                depth_stack.pop()
            start = i + 1
        elif c in ";" and all(d in ("ns", "anon") for d in depth_stack):
            start = i + 1
        elif c == "\n" and src[start:i].lstrip().startswith("#"):
            start = i + 1
        i += 1
    return sorted(sigs)


def main():
    root = sys.argv[1]
    problems = []
    ex_root, sol_root = os.path.join(root, "exercises"), os.path.join(root, "solutions")
    chapters = sorted(set(os.listdir(ex_root)) | set(os.listdir(sol_root)))
    chapters = [c for c in chapters if re.match(r"\d\d_", c)]
    for ch in chapters:
        ex_dir, sol_dir = os.path.join(ex_root, ch), os.path.join(sol_root, ch)
        ex_files = set(os.listdir(ex_dir)) if os.path.isdir(ex_dir) else set()
        sol_files = set(os.listdir(sol_dir)) if os.path.isdir(sol_dir) else set()
        for f in sorted(ex_files ^ sol_files):
            if f == "leak_keys.json" and f in sol_files:
                continue  # the reference's key expressions (scripts/check_exercise_leaks.py)
            where = "exercises" if f in ex_files else "solutions"
            problems.append(f"{ch}/{f}: only in {where}/")
        for f in sorted(ex_files & sol_files):
            if not f.endswith((".cpp", ".cu", ".h")):
                continue
            a = definitions(os.path.join(ex_dir, f), external_only=True)
            b = definitions(os.path.join(sol_dir, f), external_only=True)
            if a != b:
                problems.append(f"{ch}/{f}: definitions differ:\n  exercises: {a}\n  solutions: {b}")
            if not a:
                problems.append(f"{ch}/{f}: no function definitions found")
        # Lesson <-> stubs.
        lesson = os.path.join(root, "docs", ch + ".md")
        todo_tasks = {}
        for f in sorted(ex_files):
            for k in re.findall(r"TODO\(Task (\d+)\)", open(os.path.join(ex_dir, f), encoding="utf-8").read()):
                todo_tasks.setdefault(k, set()).add(f"exercises/{ch}/{f}")
        if not os.path.exists(lesson):
            problems.append(f"{ch}: lesson docs/{ch}.md is missing")
            continue
        text = open(lesson, encoding="utf-8").read()
        named = re.findall(r"Task (\d+) -> `([^`]+)`", text)
        if not named:
            problems.append(f"docs/{ch}.md: no 'Task K -> `path`' sections")
        for k, path in named:
            full = os.path.join(root, path)
            if not os.path.isfile(full):
                problems.append(f"docs/{ch}.md: Task {k} names {path}, which does not exist")
            elif f"TODO(Task {k})" not in open(full, encoding="utf-8").read():
                problems.append(f"docs/{ch}.md: Task {k} names {path}, which has no TODO(Task {k})")
        for k, files in todo_tasks.items():
            if not any(nk == k for nk, _ in named):
                problems.append(f"{sorted(files)}: TODO(Task {k}) has no 'Task {k} -> ' section in docs/{ch}.md")
    for p in problems:
        print("SYNC: " + p)
    print(f"checked {len(chapters)} chapter(s): {'in sync' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
