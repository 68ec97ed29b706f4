"""The one main of the benchmarks that measure, write OUT.json and OUT.md, and print the Markdown
(bench/families/run.py, bench/families/hybrid_kv.py, bench/cpu_decode/bandwidth_streams.py,
bench/06_speculative/draft_cost.py): once four near-copies, each with its own flag block."""
import os
import sys

from liobench import ROOT, flags
from liobench.results_meta import provenance, write_results


def bench_main(doc, out_name, repeats, measure, markdown, needs=(), prepare=None, argv=None):
    """Parses --bin, --repeats (default `repeats`), --threads (every core) and --out (default
    bench/results/OUT_NAME); exits with "no PATH: HINT" when a (PATH, HINT) of `needs` (paths
    relative to ROOT) is missing; calls prepare(args) if given; takes the provenance; then
    measure(args) -> dict of the results' own keys. Writes {"provenance", "threads", "repeats",
    **measured} as OUT.json and markdown(result as written) as OUT.md (results_meta.write_results:
    atomic, no local paths), prints the Markdown and returns the result as written."""
    ap = flags.parser(doc)
    flags.add_bin(ap)
    flags.add_repeats(ap, repeats)
    flags.add_threads(ap)
    flags.add_out(ap, out_name)
    a = ap.parse_args(argv)
    for path, hint in needs:
        if not os.path.exists(os.path.join(ROOT, path)):
            sys.exit(f"no {path}: {hint}")
    if prepare:
        prepare(a)
    result = {"provenance": provenance(), "threads": a.threads, "repeats": a.repeats}
    result.update(measure(a))
    written = write_results(a.out, result, markdown)
    print(markdown(written))
    return written
