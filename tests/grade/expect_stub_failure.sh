#!/usr/bin/env bash
# expect_stub_failure.sh TEST_BINARY — passes when the grading test binary, linked against
# the unsolved stubs, fails cleanly: non-zero exit, no crash, and not one test case passing.
bin="$1"
out="$("$bin" 2>&1)"
rc=$?
if ((rc == 0)); then
  echo "BUG: $(basename "$bin") passes on the stubs:"; echo "$out" | tail -20; exit 1
fi
if ((rc >= 128)); then
  echo "BUG: $(basename "$bin") crashed on the stubs (rc=$rc)"; echo "$out" | tail -20; exit 1
fi
passed=$(echo "$out" | grep -c '^\[       OK \]')
if ((passed > 0)); then
  echo "BUG: $passed test case(s) of $(basename "$bin") pass on the stubs:"
  echo "$out" | grep '^\[       OK \]'
  exit 1
fi
failed=$(echo "$out" | grep -c '^\[  FAILED  \] [A-Za-z]')
echo "ok: all $failed test case(s) of $(basename "$bin") fail on the stubs"
