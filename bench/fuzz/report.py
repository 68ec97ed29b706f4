#!/usr/bin/env python3
"""report.py — the results file of a scripts/fuzz.sh run: per target, the seconds it ran, the
seeds it started from, executions, executions per second, coverage (libFuzzer's "cov": edges
of the instrumented code reached; "ft": features, edges with hit counts and comparisons), the
corpus it ended with, and whether it found anything. Reads the WORK/<target>.summary.json
lines scripts/fuzz.sh writes; writes OUT.json and OUT.md with command, commit, machine and date.

    python3 bench/fuzz/report.py --work build-asan/fuzz --out bench/results/fuzz_cpu \
        --targets gguf safetensors ... --command "scripts/fuzz.sh --minutes 10 ..."
"""
import argparse
import json
import os

from liobench import flags, results_meta


def markdown(r):
    p = r["provenance"]
    lines = ["# Coverage-guided fuzzing of LIO's readers of untrusted bytes (tests/fuzz)", ""]
    lines += results_meta.provenance_lines(p)
    lines += ["", "libFuzzer under ASan + UBSan (Clang, preset `fuzz`), one target after another, each "
              "from its committed seeds (`tests/fuzz/corpus/`). edges / features: libFuzzer's `cov` / `ft` "
              "at the end of the run. A finding is a crash, a sanitizer report, a leak or an exception "
              "other than LIO's typed errors (tests/fuzz/fuzz_support.h).", ""]
    lines += ["| target | seconds | seeds | executions | exec/s | edges | features | corpus | finding |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for t in r["targets"]:
        lines.append(f"| {t['target']} | {t['seconds']} | {t['seeds']} | {t['runs']:,} | "
                     f"{t['runs'] // max(t['seconds'], 1):,} | {t['edges']:,} | {t['features']:,} | "
                     f"{t['corpus']:,} | {'none' if t['exit'] == 0 else 'yes (exit ' + str(t['exit']) + ')'} |")
    lines.append("")
    lines.append(f"Total: {sum(t['runs'] for t in r['targets']):,} executions.")
    lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True)
    flags.add_out(ap)
    ap.add_argument("--targets", nargs="+", required=True)
    ap.add_argument("--command", required=True)
    a = ap.parse_args()
    rows = []
    for t in a.targets:
        with open(os.path.join(a.work, t + ".summary.json")) as f:
            rows.append(json.load(f))
    result = {"provenance": results_meta.provenance(a.command), "targets": rows}
    results_meta.write_results(a.out, result, markdown)
    print(f"wrote {a.out}.json and {a.out}.md")


if __name__ == "__main__":
    main()
