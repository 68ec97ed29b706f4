#!/usr/bin/env python3
"""What every file in bench/results records about its run (COURSE.md, "Performance method"):
the command line, the commit, the machine (CPU model and flags, cores, GPU and driver where
there is one) and the date, and never a path of the machine it ran on.

Python producers import it (liobench is installed in .venv; see bench/liobench/__init__.py):

    from liobench.results_meta import provenance, provenance_lines, local_path_free
    out = {"provenance": provenance(), ...}          # JSON: one "provenance" object
    lines += provenance_lines(prov)                  # Markdown: "- Command: ..." lines

Shell producers call it:

    # (PYTHONPATH=bench, or .venv/bin/python)
    python3 -m liobench.results_meta provenance --command "..."      # the JSON object
    python3 -m liobench.results_meta md-table-json OUT.md OUT.json --keys a,b,c --command "..."
        # the first Markdown table of OUT.md as {"provenance": ..., "rows": [...]}
    python3 -m liobench.results_meta stamp OUT.json --command "build/bin/ch03_quantization ..."
        # a JSON a program wrote (ch03_quantization --json > OUT.json): adds "provenance" first
        # (unless the program wrote one) and takes local paths out of every string

read_bandwidth_gbs(bin_dir, model, threads) measures the machine's read bandwidth in the same run
(bench_decode's probe), for the "achieved GB/s against a measured figure" the method asks for.

Standard library only. Each field that cannot be found says so ("not recorded: ...") rather
than guessing.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys

from liobench import ROOT
from liobench.stats import spread  # noqa: F401  (the producers' old name for it)

CPU_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx_vnni", "amx_tile")  # the kernels' choices


def local_path_free(text):
    """`text` with the machine's own paths taken out: the repository root becomes a relative
    path, $HOME becomes ~, and anything under /tmp becomes TMP/ (a scratch directory)."""
    text = str(text)
    for root in {ROOT, os.path.realpath(ROOT), os.getcwd()}:
        text = text.replace(root + os.sep, "").replace(root, ".")
    home = os.path.expanduser("~")
    if home not in ("", "/"):
        text = text.replace(home + os.sep, "~/")
    return re.sub(r"/tmp/(?:[^/\s'\"]+/)*", "TMP/", text)


def command_line(argv=None):
    """The command that ran this script, as a shell would read it, without local paths."""
    argv = sys.argv if argv is None else argv
    exe = "python3" if not sys.executable else os.path.basename(sys.executable)
    if sys.executable and sys.executable.startswith(os.path.join(ROOT, ".venv")):
        exe = ".venv/bin/python"
    return local_path_free(" ".join(shlex.quote(a) for a in [exe, *argv]))


def _run(cmd):
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


# What is not code: a reproduction writes results and re-renders the lessons while it runs, and a
# results file written after an earlier step's must still name a clean commit (bench_util.h's
# git_commit() keeps the same list).
NOT_CODE = ("bench/results", "docs/*.md", "README.md")


def git_commit():
    """Short hash of HEAD, with "-dirty" when tracked files other than results and rendered
    prose (NOT_CODE) differ from it. LIO_COMMIT, when set, is taken as it is (bench/reproduce.py
    sets it once at the start; the GPU check's bundle sets it to the commit it was built from)."""
    env = os.environ.get("LIO_COMMIT")
    if env:
        return env
    head = _run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    if not head:
        return "not recorded: no git checkout"
    dirty = _run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no", "--", "."]
                 + [f":(exclude){p}" for p in NOT_CODE])
    return head + ("-dirty" if dirty else "")


def machine():
    """CPU model, flags the kernels care about, cores, memory; GPU name and driver if nvidia-smi answers."""
    info = {"cpu": "not recorded", "cores": os.cpu_count(), "arch": platform.machine()}
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        if m:
            info["cpu"] = m.group(1).strip()
        m = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
        if m:
            have = set(m.group(1).split())
            info["cpu_flags"] = [f for f in CPU_FLAGS if f in have]
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            info["mem_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    gpu = _run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    if gpu:
        names, drivers = zip(*[(p.strip() for p in line.split(",", 1)) for line in gpu.splitlines() if "," in line])
        info["gpu"], info["driver"] = "; ".join(names), drivers[0]
    else:
        info["gpu"] = None
    return info


def provenance(command=None):
    """{"command", "commit", "machine", "date"} for a results file written now."""
    return {"command": local_path_free(command) if command else command_line(),
            "commit": git_commit(), "machine": machine(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def machine_text(m):
    """One line for a Markdown header."""
    if isinstance(m, str):
        return m
    text = f'{m.get("cpu", "not recorded")}, {m.get("cores", "?")} cores'
    if m.get("cpu_flags"):
        text += f' ({" ".join(m["cpu_flags"])})'
    if m.get("gpu"):
        text += f'; GPU {m["gpu"]}, driver {m.get("driver", "not recorded")}'
    return text


def provenance_lines(p):
    """Markdown list lines for a provenance dict."""
    return [f'- Command: `{p["command"]}`', f'- Commit: {p["commit"]}', f'- Machine: {machine_text(p["machine"])}',
            f'- Date: {p["date"]}']


def cell(text):
    text = text.strip()
    low = text.lower()
    if low in ("yes", "no"):
        return low == "yes"
    try:
        return int(text.replace(",", ""))
    except ValueError:
        pass
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return text


def md_table(path, keys=None):
    """The first Markdown table of `path` as a list of dicts (numbers parsed; yes / no as bools)."""
    with open(path, encoding="utf-8") as f:
        lines = [line.strip() for line in f]
    start = next(i for i, line in enumerate(lines) if line.startswith("|") and i + 1 < len(lines)
                 and re.match(r"^\|[\s:|-]+\|$", lines[i + 1]))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    keys = keys or header
    if len(keys) != len(header):
        raise SystemExit(f"md_table: {len(keys)} keys for {len(header)} columns {header}")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(keys, (cell(c) for c in line.strip("|").split("|")))))
    return rows


def without_local_paths(value):
    """`value` (JSON data) with local_path_free applied to every string in it."""
    if isinstance(value, dict):
        return {k: without_local_paths(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_local_paths(v) for v in value]
    return local_path_free(value) if isinstance(value, str) else value


NUMERIC_PROBE_KEYS = ("read_bandwidth_gbs", "compute_peak_f32_gflops", "compute_peak_int8_gops")  # GB/s, GFLOP/s, GOP/s
PROBE_KEYS = NUMERIC_PROBE_KEYS + ("compute_peak_isa",)


def machine_probes(bin_dir, model, threads):
    """bench_decode's read-bandwidth (GB/s) and compute-peak (GFLOP/s f32, GOP/s int8, and the
    ISA) probes from one short run: {key: value for PROBE_KEYS}, each None when bench_decode is
    missing or fails (a GPU image may lack it)."""
    exe = os.path.join(bin_dir, "bench_decode")
    if not os.path.exists(exe):
        return dict.fromkeys(PROBE_KEYS)
    try:
        out = subprocess.run([exe, "--model", model, "--json", "--prompt-tokens", "8", "--decode-tokens", "4",
                              "--repeats", "1", "--threads", str(threads)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True,
                             timeout=300).stdout
        got = json.loads(out)
    except (subprocess.SubprocessError, ValueError):
        return dict.fromkeys(PROBE_KEYS)
    return {k: got.get(k) for k in PROBE_KEYS}


def read_bandwidth_gbs(bin_dir, model, threads):
    """Read bandwidth (GB/s) from bench_decode's probe (a short run), or None if unavailable."""
    return machine_probes(bin_dir, model, threads)["read_bandwidth_gbs"]


def write_text(path, text):
    """Writes `text` to `path` atomically: a temporary beside it, then a rename, so a run killed
    mid-write leaves the old file or the new one, never half of one (lio/atomic_file.h's rule).
    `text` may be bytes (a plot, a copied results file)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb" if isinstance(text, bytes) else "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_results(out_base, result, markdown):
    """Writes `result` (a dict with "provenance") as OUT_BASE.json with local paths taken out,
    and markdown(result as written) as OUT_BASE.md; returns the result as written (what a plot
    should draw)."""
    text = local_path_free(json.dumps(result, indent=1))
    write_text(out_base + ".json", text + "\n")
    written = json.loads(text)
    write_text(out_base + ".md", markdown(written))
    return written


def stamp(path, command):
    """Adds provenance (first key) to the JSON object at `path` unless it has one, and takes
    local paths out of its strings; rewrites the file."""
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise SystemExit(f"stamp: {path} does not hold a JSON object")
    out = {"provenance": data.pop("provenance", None) or provenance(command)}
    out.update(without_local_paths(data))
    write_text(path, json.dumps(out, indent=2) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("provenance", help="print the provenance JSON object")
    p.add_argument("--command", help="the command line to record (default: this one)")
    t = sub.add_parser("md-table-json", help="write the first table of a Markdown file as JSON rows")
    t.add_argument("md")
    t.add_argument("json")
    t.add_argument("--keys", help="comma-separated keys, one per column (default: the header cells)")
    t.add_argument("--command", required=True, help="the command line that produced the table")
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra top-level settings (repeatable)")
    st = sub.add_parser("stamp", help="add provenance to a JSON a program wrote, and strip its local paths")
    st.add_argument("json")
    st.add_argument("--command", required=True, help="the command line that wrote it")
    sp = sub.add_parser("strip-paths", help="rewrite a text results file with the machine's own paths taken out")
    sp.add_argument("path")
    a = ap.parse_args()
    if a.what == "strip-paths":
        with open(a.path) as f:
            write_text(a.path, local_path_free(f.read()))
        return
    if a.what == "stamp":
        stamp(a.json, a.command)
        return
    if a.what == "provenance":
        print(json.dumps(provenance(a.command), indent=2))
        return
    out = {"provenance": provenance(a.command)}
    for kv in a.set:
        k, _, v = kv.partition("=")
        out[k] = local_path_free(v) if not isinstance(cell(v), (int, float)) else cell(v)
    out["rows"] = md_table(a.md, a.keys.split(",") if a.keys else None)
    with open(a.json, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
