#!/usr/bin/env bash
# gpu_check_dry_run.sh BIN_DIR WORK_DIR — scripts/gpu_check.sh --dry-run on this build, so the GPU
# check cannot rot between GPU loans: it must run every step that needs no GPU (the host-side CUDA
# helpers, the argument checks inside every CUDA test binary, library and model checks, the peer
# benchmarks' command lines parsed as the GPU branch would run them), report
# each GPU step as skipped, exit 0, and write a report whose JSON and Markdown agree.
set -uo pipefail
bin="$1"
work="$2"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rm -rf "$work" && mkdir -p "$work"
if ! ls "$bin"/test_cuda_* >/dev/null 2>&1; then
  echo "SKIP: this build has no CUDA test binaries (configured without nvcc)"
  exit 77
fi
fail=0
check() {  # NAME CONDITION...
  local name="$1"
  shift
  if "$@"; then echo "ok   $name"; else echo "FAIL $name"; fail=1; fi
}
bash "$root/scripts/gpu_check.sh" --dry-run --bin-dir "$bin" --out "$work" >"$work/stdout.log" 2>&1
rc=$?
check "dry run exits 0 (got $rc)" test "$rc" -eq 0
[[ $rc -eq 0 ]] || tail -40 "$work/stdout.log"
json="$work/cuda_dry_run_validation.json"
md="$work/cuda_dry_run_validation.md"
check "writes the JSON report" test -s "$json"
check "writes the Markdown report" test -s "$md"
check "writes the full log" test -s "$work/gpu_check.log"
summary=$(python3 - "$json" "$bin" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1]))
steps = {s["name"]: s for s in d["steps"]}
gpu_steps = ["nvidia-smi", "bench_cuda_decode", "ch07_flash_attention kernels --device cuda", "greedy text CPU == CUDA",
             "memcheck flash + naive attention", "memcheck paged attention + kv_append", "memcheck MLA"]
bad = [n for n in gpu_steps if steps.get(n, {}).get("status") != "skipped"]
binaries = sorted(b for b in os.listdir(sys.argv[2]) if b.startswith("test_cuda_"))
ran = sorted(g["binary"] for g in d["gtest"])
host_ran = all(g["passed"] > 0 for g in d["gtest"] if g["binary"].endswith("_host"))
prov = d["provenance"]
parse = [n for n in ("peer.py command line parses (--check-args)", "batched/run.py command line parses (--check-args)")
         if steps.get(n, {}).get("status") != "passed"]
print(" ".join([
    "peer_command_lines_parse=" + ("yes" if not parse else "no:" + ",".join(parse)),
    "gpu_steps_skipped=" + ("yes" if not bad else "no:" + ",".join(bad)),
    "every_binary_ran=" + ("yes" if binaries == ran and binaries else "no"),
    "host_tests_ran=" + ("yes" if host_ran else "no"),
    "nothing_failed=" + ("yes" if d["summary"]["failed"] == 0 else "no"),
    "provenance=" + ("yes" if prov.get("commit") and prov.get("date") and prov.get("command") else "no"),
    "no_local_paths=" + ("yes" if "/work/" not in json.dumps(d) and "/tmp/" not in json.dumps(d) else "no"),
]))
PY
)
echo "$summary"
for key in peer_command_lines_parse gpu_steps_skipped every_binary_ran host_tests_ran nothing_failed provenance no_local_paths; do
  check "$key" grep -q "$key=yes" <<<"$summary"
done
check "the Markdown lists every skipped GPU step" grep -q "| bench_cuda_decode | skipped |" "$md"
# What scripts/gpu_bundle.sh packs must exist in the build (a renamed target would break the
# next GPU loan's bundle, not this test, unless checked here).
while read -r program; do
  check "gpu_bundle.sh's program $program is built" test -x "$bin/$program"
done < <(bash "$root/scripts/gpu_bundle.sh" --print-programs)
exit $fail
