"""liobench: what the benchmark scripts under bench/ share (issue 62, item 4).

    from liobench import flags                 # the shared command-line flags (--bin, --repeats, ...)
    from liobench.results_meta import ...      # provenance, results files written with no local paths
    from liobench.stats import spread          # median and spread of repeated measurements
    from liobench.tables import md_table       # Markdown table lines
    from liobench.plot_util import ...         # matplotlib helpers (the venv only)
    from liobench import bench_main            # the one main of the measure / write / print benchmarks

Importable with no sys.path edit: scripts/setup.sh installs it into .venv in editable mode
(bench/pyproject.toml); CTest and the shell scripts that run a benchmark under another Python put
bench/ on PYTHONPATH. Standard library only, except plot_util (matplotlib).

ROOT is the repository root (this package lives in ROOT/bench/liobench).
"""
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def repo_module(relpath):
    """The Python file ROOT/relpath (e.g. "scripts/make_f32_copy.py") imported as a module, once
    (later calls return the same module), without putting its directory on sys.path. Its name is
    the path's ("repo:scripts/make_f32_copy"), so two files of one name (bench/*/run.py) stay two
    modules. Raises FileNotFoundError when the file is missing."""
    name = "repo:" + os.path.splitext(os.path.normpath(relpath))[0]
    if name in sys.modules:
        return sys.modules[name]
    path = os.path.join(ROOT, relpath)
    if not os.path.isfile(path):
        raise FileNotFoundError(path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
