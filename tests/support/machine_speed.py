#!/usr/bin/env python3
"""How fast this build runs on this machine, now: the one calibration every clock-bound test scales by.

The tests that wait on the clock (a server's start-up, "idle within 1 s" after a client hangs up,
a shutdown deadline, an MPI job that must end after a rank dies) state their waits for a Release
build on an idle 2-core machine. A sanitizer makes every engine step several times slower, and a
slower or busy machine slows it again, so a fixed wait makes the verdict depend on the machine.
Instead of guessing a factor per preset, this script measures one:

    machine_speed.py measure --lio BIN --model GGUF --out FILE

runs this build's `lio generate` on the default model (batch-1 decode, EOS ignored, 16 tokens)
RUNS times and keeps the median decode step (TPOT, ms per output token). FILE gets
    {"tpot_ms": ..., "reference_tpot_ms": REFERENCE_TPOT_MS, "slow_factor": max(1, tpot / reference), ...}
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
import time

# The decode step the tests' literal waits were set against: the Release build (default int8
# activations, 2 OpenMP threads) on SmolLM2-135M Q4_1 on the 2-core Intel Xeon of
# bench/results/fresh_machine_cpu.md, measured by this script: 7.0-7.9 ms over idle runs on
# 2026-11-29 (the AMD EPYC of bench/results/cpu_decode.md runs 5.6 ms: 178 tok/s). Rounded up,
# so an idle Release run anywhere near those machines keeps factor 1.
REFERENCE_TPOT_MS = 8.0
RUNS = 3
MAX_TOKENS = 16
PROMPT = "The history of computing is a story of"


def measure_once(lio, model):
    """One `lio generate --json` run; returns (tpot_ms, wall_s). Raises RuntimeError with lio's
    stderr if it fails or prints something other than its JSON summary."""
    cmd = [lio, "generate", "--model", model, "--prompt", PROMPT, "--max-tokens", str(MAX_TOKENS),
           "--ignore-eos", "--temperature", "0", "--json"]
    t0 = time.monotonic()
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall_s = time.monotonic() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}:\n{out.stderr[-2000:]}")
    try:
        j = json.loads(out.stdout)
        tpot_ms = float(j["tpot_ms"])
    except (ValueError, KeyError) as e:
        raise RuntimeError(f"lio generate --json printed no tpot_ms ({e}): {out.stdout[:500]!r}") from e
    if not tpot_ms > 0:
        raise RuntimeError(f"lio generate reported tpot_ms {tpot_ms} for {MAX_TOKENS} tokens")
    return tpot_ms, wall_s


def measure(args):
    record = {
        "what": "this build's batch-1 decode step on the default model, the tests' slow factor",
        "lio": os.path.basename(args.lio),
        "build_dir": os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(args.lio)))),
        "machine": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "reference_tpot_ms": REFERENCE_TPOT_MS,
    }
    if not os.path.isfile(args.model):
        record.update(tpot_ms=None, runs_tpot_ms=[], slow_factor=1.0,
                      note=f"no model at {args.model}: factor 1 (the tests that need it skip)")
    else:
        runs = [measure_once(args.lio, args.model) for _ in range(RUNS)]
        tpots = [t for t, _ in runs]
        tpot = statistics.median(tpots)
        record.update(tpot_ms=round(tpot, 3), runs_tpot_ms=[round(t, 3) for t in tpots],
                      runs_wall_s=[round(w, 2) for _, w in runs],
                      slow_factor=round(max(1.0, tpot / REFERENCE_TPOT_MS), 2))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    os.replace(tmp, args.out)
    print(f"machine_speed: TPOT {record['tpot_ms']} ms (runs {record['runs_tpot_ms']}), reference "
          f"{REFERENCE_TPOT_MS} ms -> slow factor {record['slow_factor']} ({args.out})", flush=True)
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
