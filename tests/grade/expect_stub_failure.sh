#!/usr/bin/env bash
# expect_stub_failure.sh [LAUNCHER...] TEST_BINARY — passes when the grading test binary, linked
# against the unsolved stubs, fails cleanly: non-zero exit, no crash, and not one test case
# passing. A launcher runs it (scripts/mpirun.sh -n 3 for an MPI test, whose rank 0 prints the
# report); the binary is the last argument.
bin="${!#}"
out="$("$@" 2>&1)"
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
if ((failed == 0)); then
  # Non-zero exit without one failed test case: the binary (or its launcher) never ran them.
  echo "BUG: $(basename "$bin") ran no test case (rc=$rc)"; echo "$out" | tail -20; exit 1
fi
echo "ok: all $failed test case(s) of $(basename "$bin") fail on the stubs"
