#!/usr/bin/env bash
# gpu_check_dry_run.sh BIN_DIR WORK_DIR — scripts/gpu_check.sh --dry-run on this build, so the GPU
# check cannot rot between GPU loans: it must run every step that needs no GPU (the host-side CUDA
# helpers, the argument checks inside every CUDA test binary, library and model checks, the peer
# benchmarks' command lines parsed as the GPU branch would run them, the memcheck filters matched
# against the test binaries), report each GPU step as skipped, exit 0, and write a report whose JSON
# and Markdown agree. Then the selection a rerun on a GPU uses: --list-steps gives every step id an
# estimate, --only and --skip run what they name and report the rest as not selected, an unknown id
# exits 2, and scripts/gpu_bundle.sh --print-calls-md plans the device calls from those estimates.
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
import json, os, re, sys
d = json.load(open(sys.argv[1]))
steps = {s["name"]: s for s in d["steps"]}
gpu_steps = ["nvidia-smi", "bench_cuda_decode", "ch07_flash_attention kernels --device cuda", "greedy text flash: CPU == CUDA",
             "greedy text flash, CUDA graphs + fused kernels: CPU == CUDA", "memcheck flash + naive attention",
             "memcheck paged attention + kv_append", "memcheck MLA", "memcheck fused + wide GEMV",
             "memcheck runner (tiny models, every op)"]
graded = [b for b in os.listdir(sys.argv[2]) if b.startswith("ch") and "_cuda_" in b and not b.endswith("_stub")]
gpu_steps += [f"grade {b}: the reference passes, the stub fails every case" for b in graded]
gpu_steps += ["memcheck chapter %s Task %s reference kernel" % re.match(r"ch(\d\d)_task_(\d+)_cuda_", b).groups()
              for b in graded]
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

# ---- step selection (--list-steps, --only, --skip) ------------------------------------------------
bash "$root/scripts/gpu_check.sh" --list-steps >"$work/steps.txt"
check "--list-steps exits 0" test $? -eq 0
# selected_run NAME ARGS...: a dry run with ARGS into $work/NAME; prints its exit status.
selected_run() {
  local name="$1"
  shift
  bash "$root/scripts/gpu_check.sh" --dry-run --bin-dir "$bin" --out "$work/$name" "$@" >"$work/$name.log" 2>&1
  echo $?
}
rc_only=$(selected_run only --only peer_decode,peer_batched)
check "--only peer_decode,peer_batched exits 0 (got $rc_only)" test "$rc_only" -eq 0
rc_skip=$(selected_run skip --skip gtest,memcheck:runner,greedy)
check "--skip gtest,memcheck:runner,greedy exits 0 (got $rc_skip)" test "$rc_skip" -eq 0
rc_one=$(selected_run one --only gtest:test_cuda_flash_host)
check "--only gtest:test_cuda_flash_host exits 0 (got $rc_one)" test "$rc_one" -eq 0
rc_bad=$(selected_run bad --only memcheck,no_such_step)
check "an unknown id exits 2 (got $rc_bad)" test "$rc_bad" -eq 2
check "an unknown id lists the valid ids" grep -q "valid ids: .*memcheck:fused" "$work/bad.log"
rc_bad_bin=$(selected_run bad_bin --skip gtest:test_cuda_no_such_binary)
check "an unknown test binary exits 2 (got $rc_bad_bin)" test "$rc_bad_bin" -eq 2
bash "$root/scripts/gpu_bundle.sh" --print-calls-md >"$work/CALLS.md"
check "gpu_bundle.sh --print-calls-md exits 0" test $? -eq 0
# The greedy comparison must find each run's log under the step's own file name: names with ',' and
# '+' once left the CPU text behind, which would have failed every --cuda-graphs comparison on a GPU.
# LIO_GPU_CHECK_ASSUME_GPU runs the step here: the CPU run writes text, the CUDA run fails.
# The same run covers every other command line of the GPU branch that a flag could break (issue 60:
# the dry run must parse every command the GPU branch runs): lio generate with each variant's
# flags on both devices, lio quantize and the real-model gtest filter, bench_cuda_decode,
# ch07_flash_attention kernels and bench_cuda_gemv. Here they may fail only for want of a GPU,
# never on their arguments (CLI11's "Run with --help", argparse's "usage:").
if [[ -f "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" ]]; then
  LIO_GPU_CHECK_ASSUME_GPU=1 bash "$root/scripts/gpu_check.sh" --bin-dir "$bin" --out "$work/greedy" \
    --only greedy,requant:q8_0,bench_decode,ch07,bench_gemv >"$work/greedy.log" 2>&1
  check "the greedy comparison reads the CPU run's text" python3 -c '
import glob, json, sys
d = json.load(open(glob.glob(sys.argv[1] + "/cuda_*_validation.json")[0]))
fused = [g for g in d["greedy"] if "fused" in g["variant"]]
sys.exit(0 if fused and fused[0]["cpu"] and all(g["cpu"] for g in d["greedy"]) else 1)' "$work/greedy"
  mkdir -p "$work/greedy/logs_unpacked"
  tar -C "$work/greedy/logs_unpacked" -xzf "$work/greedy/gpu_check_logs.tar.gz" 2>/dev/null
  n_logs=$(find "$work/greedy/logs_unpacked/logs" -name '*.log' | wc -l)
  check "the assumed-GPU run logged the GPU branch's commands ($n_logs logs)" test "$n_logs" -ge 18
  parse_errors=$(grep -lE "Run with --help|^usage: |unrecognized arguments|error: argument" \
    "$work/greedy/logs_unpacked/logs"/*.log 2>/dev/null)
  [[ -z "$parse_errors" ]] || { echo "command-line errors in:"; echo "$parse_errors"; head -5 $parse_errors; }
  check "no command of the GPU branch fails on its arguments" test -z "$parse_errors"
else
  echo "skip the greedy comparison's check: no models/SmolLM2-135M-Instruct.Q4_1.gguf"
fi
summary=$(python3 - "$work" "$json" <<'PY'
import json, os, re, sys
work, full = sys.argv[1], json.load(open(sys.argv[2]))
listed = {}
for line in open(os.path.join(work, "steps.txt")):
    if line.strip() and not line.startswith("#"):
        fields = line.split(None, 3)
        listed[fields[0]] = fields[1]
def report(name):
    path = os.path.join(work, name, "cuda_dry_run_validation.json")
    return json.load(open(path)) if os.path.exists(path) else {"steps": [], "gtest": [], "provenance": {}}
def row_id(sid):  # one id per test binary in the report, one gtest row in the table
    return "gtest" if sid.startswith("gtest:") else sid
NOT_SELECTED = "not selected (--only/--skip)"
SETUP = {"smi", "libs", "model"}
ran = {row_id(s["id"]) for s in full["steps"]}
ok = {"every_step_has_an_estimate": ran <= set(listed) and all(v.isdigit() for v in listed.values()),
      "every_estimate_is_a_step": set(listed) <= ran}
only = report("only")
named = {"peer_decode", "peer_batched"}
ok["only_runs_what_it_names"] = (
    all(s["status"] == "passed" for s in only["steps"] if s["id"] in named and "--check-args" in s["name"])
    and sum(1 for s in only["steps"] if s["id"] in named and "--check-args" in s["name"]) == 2
    and all(s["detail"] == NOT_SELECTED for s in only["steps"] if s["id"] not in named | SETUP)
    and not any(s["detail"] == NOT_SELECTED for s in only["steps"] if s["id"] in SETUP - {"smi"})
    and not only["gtest"])
skip = report("skip")
skipped = lambda sid: sid.startswith(("gtest:", "greedy:")) or sid == "memcheck:runner"
ok["skip_leaves_out_what_it_names"] = (
    all(s["detail"] == NOT_SELECTED for s in skip["steps"] if skipped(s["id"]))
    and not any(s["detail"] == NOT_SELECTED for s in skip["steps"] if not skipped(s["id"]))
    and not skip["gtest"])
one = report("one")
ok["only_one_test_binary"] = [g["binary"] for g in one["gtest"]] == ["test_cuda_flash_host"] and one["gtest"][0]["passed"] > 0
ok["command_records_the_selection"] = (only["provenance"].get("command", "").endswith("--only peer_decode,peer_batched")
                                       and skip["provenance"].get("command", "").endswith("--skip gtest,memcheck:runner,greedy"))
calls = open(os.path.join(work, "CALLS.md")).read()
ok["calls_md_times_every_step"] = all(f"| `{sid}` | " in calls for sid in listed) and "the full check" in calls
ok["calls_md_has_the_rerun_call"] = "--only <ids>" in calls and bool(re.search(r"calls and the check\*\* \| \*\*\d+ s", calls))
print(" ".join(f"{k}={'yes' if v else 'no'}" for k, v in ok.items()))
PY
)
echo "$summary"
for key in every_step_has_an_estimate every_estimate_is_a_step only_runs_what_it_names skip_leaves_out_what_it_names \
           only_one_test_binary command_records_the_selection calls_md_times_every_step calls_md_has_the_rerun_call; do
  check "$key" grep -q "$key=yes" <<<"$summary"
done
exit $fail
