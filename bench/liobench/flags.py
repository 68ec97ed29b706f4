"""The command-line flags every benchmark script shares, one definition each.

    ap = flags.parser(__doc__)
    flags.add_bin(ap); flags.add_repeats(ap, 5); flags.add_threads(ap); flags.add_out(ap, "families_cpu")
    a = ap.parse_args()

Paths default to this checkout (ROOT): --bin ROOT/build/bin, --lio ROOT/build/bin/lio, --model the
course's default model file, --out ROOT/bench/results/NAME (a prefix: the script writes NAME.json
and NAME.md). --threads defaults to every core unless the script names a number.
"""
import argparse
import os

from liobench import ROOT

DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def parser(doc):
    """An ArgumentParser whose --help prints the script's docstring `doc` as written."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_bin(ap, help="directory of the built programs (bench_decode, lio, ...)"):
    """--bin DIR: the build's bin directory (default ROOT/build/bin)."""
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"), help=help)


def add_lio(ap, default=os.path.join(ROOT, "build", "bin", "lio"), help="the lio program"):
    """--lio PATH: the lio program (default ROOT/build/bin/lio; None: required by the script's own check)."""
    ap.add_argument("--lio", default=default, help=help)


def add_model(ap, default=DEFAULT_MODEL, help="GGUF model file"):
    """--model PATH (default: SmolLM2-135M Q4_1 under ROOT/models)."""
    ap.add_argument("--model", default=default, help=help)


def add_repeats(ap, default, help="repeats of each measurement (COURSE.md: median and spread)"):
    """--repeats N (int)."""
    ap.add_argument("--repeats", type=int, default=default, help=help)


def add_threads(ap, default=None, help="CPU threads (default: every core)"):
    """--threads N (int; default os.cpu_count() unless `default` is given)."""
    ap.add_argument("--threads", type=int, default=os.cpu_count() if default is None else default, help=help)


def add_out(ap, name=None, help="output prefix: writes PREFIX.json and PREFIX.md"):
    """--out PREFIX: ROOT/bench/results/NAME by default; required when `name` is None."""
    if name is None:
        ap.add_argument("--out", required=True, help=help)
    else:
        ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", name), help=help)
