#!/usr/bin/env bash
# grade_args.sh WORK — scripts/grade.sh keeps its promises before it builds anything (issue 61,
# item 4): a bad call is exit 2 with its usage; --check-deps finds everything on this machine (the
# build that runs this test needed it all); a missing dependency — a Debian package it is told to
# treat as missing, or ninja hidden from PATH — is exit 3 naming the package and the one command
# that installs it, and grading stops there, before configuring anything.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
script="$root/scripts/grade.sh"
work="$1"
rm -rf "$work" && mkdir -p "$work"
bash_bin="$(command -v bash)"
fail() { echo "FAIL: $*" >&2; exit 1; }
# run ARGS...: grade.sh's exit code in $rc, its stdout and stderr in $work/out.
run() { "$bash_bin" "$script" "$@" >"$work/out" 2>&1; rc=$?; }
expect() {  # expect RC TEXT WHAT: the last run exited RC and printed TEXT
  [[ $rc == "$1" ]] || fail "$3: exit $rc, expected $1: $(cat "$work/out")"
  grep -qF -- "$2" "$work/out" || fail "$3: no '$2' in: $(cat "$work/out")"
}

"$bash_bin" -n "$script" || fail "syntax"

# ---- arguments ----------------------------------------------------------------------------------
run;              expect 2 "usage: scripts/grade.sh NN" "no chapter"
run 1;            expect 2 "unexpected argument '1'" "one digit"
run abc;          expect 2 "unexpected argument 'abc'" "not a number"
run --bogus;      expect 2 "unexpected argument '--bogus'" "a bad flag"
run 01 02;        expect 2 "one chapter at a time" "two chapters"
run 99;           expect 2 "chapter 99 has no exercises/ directory" "no such chapter"
run --help;       expect 0 "--check-deps" "--help"

# ---- dependencies ---------------------------------------------------------------------------------
run --check-deps 01
expect 0 "everything grading needs is there" "--check-deps on the machine that built this test"

LIO_GRADE_ASSUME_MISSING="libgtest-dev" run --check-deps 01
expect 3 "missing: Debian package libgtest-dev (GoogleTest" "GoogleTest missing"
expect 3 "apt-get install -y --no-install-recommends libgtest-dev" "GoogleTest's install command"

# ninja hidden: a PATH with only what grade.sh calls before it builds, and no apt-get, so even a
# plain `grade.sh 01` run as root can only name the command.
mkdir -p "$work/bin"
for cmd in dirname ls cut paste id grep dpkg-query cmake c++ pkg-config python3; do
  p="$(command -v "$cmd")" && ln -s "$p" "$work/bin/$cmd"
done
PATH="$work/bin" run --check-deps 01
expect 3 "missing: ninja (Debian package ninja-build)" "ninja hidden from PATH"
PATH="$work/bin" run 01
expect 3 "install with:" "grade.sh 01 without ninja or apt-get"
expect 3 "apt-get install -y --no-install-recommends ninja-build" "ninja's install command"
! grep -q "configuring" "$work/out" || fail "grade.sh configured although ninja is missing: $(cat "$work/out")"

echo "grade.sh: arguments and dependency checks ok"
