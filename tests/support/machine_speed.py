#!/usr/bin/env python3
"""How fast this build runs on this machine, now: the one calibration every clock-bound test scales by.

The tests that wait on the clock (a server's start-up, "idle within 1 s" after a client hangs up,
a shutdown deadline, an MPI job that must end after a rank dies) state their waits for a Release
build on an idle 2-core machine, run as ctest runs them (OMP_WAIT_POLICY=passive). A sanitizer
makes every engine step several times slower, and a slower or busy machine slows it again, so a
fixed wait makes the verdict depend on the machine. Instead of guessing a factor per preset, this
script measures one:

    machine_speed.py measure --lio BIN --model GGUF --out FILE

runs this build's `lio batch` on the default model: BATCH requests decoded together, sampled as
the server tests sample (temperature 0.7, top-p 0.9), MAX_TOKENS tokens each with EOS ignored. It
does that RUNS times and keeps the median decode step (the batch's median TPOT, ms). A batched,
sampled step is what the server tests wait on: a sanitizer's cost lies mostly in the code around
the kernels (the sampler over a 49,152-token vocabulary per sequence, the scheduler), which a
batch-1 greedy step barely runs (under TSan, whose kernels are uninstrumented, such a step was
faster than Release's; the batched one is 4.3x slower, as the server tests' latencies are).
FILE gets
    {"step_ms": ..., "reference_step_ms": REFERENCE_STEP_MS, "slow_factor": max(1, step / reference), ...}
ctest runs it once per build tree, first and alone, as the fixture `machine_speed`
(tests/CMakeLists.txt); the tests that need it list FIXTURES_REQUIRED machine_speed.

    machine_speed.py factor FILE      prints the slow factor (for shell tests); 1 if FILE is absent
    import machine_speed; machine_speed.slow_factor(FILE)   the same from Python

A factor is never below 1: a faster machine keeps the waits as written. Exit codes of measure:
0 written (a missing model writes factor 1 and says so: the tests that need the model skip),
1 lio failed (the fixture fails, and ctest runs none of the tests that require it).
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

# The decode step the tests' literal waits were set against: the Release build (default int8
# activations, 2 OpenMP threads, OMP_WAIT_POLICY=passive as ctest runs the clock-bound tests) on
# SmolLM2-135M Q4_1 on the 2-core Intel Xeon of bench/results/fresh_machine_cpu.md, measured by
# this script's workload: 48.0-55.7 ms over 6 idle runs on 2026-11-29 (ASan 312 ms, TSan 239 ms
# there). Rounded up, so an idle Release run anywhere near that machine keeps factor 1.
REFERENCE_STEP_MS = 60.0
RUNS = 3
BATCH = 16
MAX_TOKENS = 16
SUBJECTS = ["the sea", "a mountain", "the moon", "a city", "trains", "bread", "rain", "music",
            "a library", "winter", "bees", "a bridge", "clocks", "maps", "salt", "lamps"]


def measure_once(lio, model, prompts, summary):
    """One `lio batch` run; returns its median decode step (ms). Raises RuntimeError with lio's
    stderr if it fails or writes no usable summary."""
    cmd = [lio, "batch", "--model", model, "--prompts", prompts, "--max-tokens", str(MAX_TOKENS),
           "--ignore-eos", "--temperature", "0.7", "--top-p", "0.9", "--max-num-seqs", str(BATCH),
           "--out", os.devnull, "--summary", summary]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}:\n{out.stderr[-2000:]}")
    try:
        with open(summary, encoding="utf-8") as f:
            s = json.load(f)
        step_ms, running = float(s["median_tpot_ms"]), int(s["max_running"])
    except (OSError, ValueError, KeyError) as e:
        raise RuntimeError(f"lio batch wrote no usable --summary ({e})") from e
    if not step_ms > 0 or running != BATCH:
        raise RuntimeError(f"lio batch: median TPOT {step_ms} ms with {running} sequences at once, "
                           f"want > 0 with {BATCH}")
    return step_ms


def measure(args):
    record = {
        "what": f"this build's decode step, {BATCH} sampled sequences at once, on the default model: "
                "the tests' slow factor",
        "lio": os.path.basename(args.lio),
        "build_dir": os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(args.lio)))),
        "machine": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "reference_step_ms": REFERENCE_STEP_MS,
    }
    if not os.path.isfile(args.model):
        record.update(step_ms=None, runs_step_ms=[], slow_factor=1.0,
                      note=f"no model at {args.model}: factor 1 (the tests that need it skip)")
    else:
        with tempfile.TemporaryDirectory(prefix="machine_speed-") as tmp:
            prompts = os.path.join(tmp, "prompts.jsonl")
            with open(prompts, "w", encoding="utf-8") as f:
                for s in SUBJECTS[:BATCH]:
                    f.write(json.dumps({"prompt": f"Write a very long essay about {s}."}) + "\n")
            steps = [measure_once(args.lio, args.model, prompts, os.path.join(tmp, "summary.json"))
                     for _ in range(RUNS)]
        step = statistics.median(steps)
        record.update(step_ms=round(step, 2), runs_step_ms=[round(t, 2) for t in steps],
                      slow_factor=round(max(1.0, step / REFERENCE_STEP_MS), 2))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp_out = args.out + ".tmp"
    with open(tmp_out, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    os.replace(tmp_out, args.out)
    print(f"machine_speed: decode step at batch {BATCH} {record['step_ms']} ms (runs {record['runs_step_ms']}), "
          f"reference {REFERENCE_STEP_MS} ms -> slow factor {record['slow_factor']} ({args.out})", flush=True)
    return 0


def slow_factor(path):
    """The slow factor recorded in `path` (>= 1); 1.0 when the file does not exist (a test run by
    hand, outside ctest's fixture). Raises ValueError on a file that is not a calibration record."""
    if not path or not os.path.isfile(path):
        return 1.0
    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    factor = float(record["slow_factor"])
    if not factor >= 1.0:
        raise ValueError(f"{path}: slow_factor {factor} is below 1")
    return factor


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="measure this build's decode step and write the record")
    m.add_argument("--lio", required=True, help="this build's lio binary")
    m.add_argument("--model", required=True, help="the default model (GGUF)")
    m.add_argument("--out", required=True, help="the record to write (JSON)")
    f = sub.add_parser("factor", help="print the slow factor of a record (1 if it is absent)")
    f.add_argument("file")
    args = ap.parse_args()
    if args.cmd == "factor":
        print(slow_factor(args.file))
        return 0
    try:
        return measure(args)
    except RuntimeError as e:
        print(f"machine_speed: FAIL: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
