"""Unit tests of the benchmark toolkit (ctest -R bench_liobench_unit; standard library only):

    PYTHONPATH=bench python3 -m unittest liobench.test_liobench
"""
import io
import json
import math
import os
import tempfile
import unittest
from contextlib import redirect_stdout

from liobench import ROOT, flags, repo_module
from liobench.main import bench_main
from liobench.results_meta import local_path_free, provenance_lines
from liobench.stats import is_tie, median_min_max, spread, spread_cell
from liobench.tables import md_table


class Stats(unittest.TestCase):
    def test_spread(self):
        self.assertEqual(spread([3, 1, 2]), {"median": 2, "min": 1, "max": 3, "samples": [3, 1, 2]})
        self.assertEqual(median_min_max([4, 1, 2, 3]), (2.5, 1, 4))
        self.assertTrue(all(math.isnan(x) for x in median_min_max([])))

    def test_cells_and_ties(self):
        self.assertEqual(spread_cell({"median": 1.25, "min": 1.0, "max": 2.0}, 2), "1.25 [1.00–2.00]")
        self.assertEqual(spread_cell((10.0, 9.0, 11.0), sep="-"), "10.0 [9.0-11.0]")
        self.assertTrue(is_tie(0.9, 1.1))
        self.assertFalse(is_tie(1.01, 1.2))


class Tables(unittest.TestCase):
    def test_md_table(self):
        self.assertEqual(md_table(["a", "b"], [[1, 2.5]], align=["l", "r"]), ["| a | b |", "|---|---:|", "| 1 | 2.5 |"])
        with self.assertRaises(ValueError):
            md_table(["a"], [], align=["l", "r"])


class Flags(unittest.TestCase):
    def test_defaults(self):
        ap = flags.parser("doc")
        flags.add_bin(ap)
        flags.add_repeats(ap, 5)
        flags.add_threads(ap, 2)
        flags.add_out(ap, "x_cpu")
        a = ap.parse_args([])
        self.assertEqual((a.bin, a.repeats, a.threads), (os.path.join(ROOT, "build", "bin"), 5, 2))
        self.assertEqual(a.out, os.path.join(ROOT, "bench", "results", "x_cpu"))
        self.assertEqual(ap.parse_args(["--repeats", "7"]).repeats, 7)


class Results(unittest.TestCase):
    def test_no_local_paths(self):
        self.assertEqual(local_path_free(os.path.join(ROOT, "build", "bin", "lio")), "build/bin/lio")
        self.assertEqual(local_path_free("/tmp/abc/out.json"), "TMP/out.json")
        self.assertEqual(provenance_lines({"command": "c", "commit": "h", "machine": "m", "date": "d"}),
                         ["- Command: `c`", "- Commit: h", "- Machine: m", "- Date: d"])

    def test_bench_main_writes_json_and_md(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r")
            md = lambda r: f"# x\n{r['threads']} {r['repeats']} {r['rows'][0]}\n"  # noqa: E731
            with redirect_stdout(io.StringIO()) as printed:
                written = bench_main("doc", "unused", 3, lambda a: {"rows": [a.repeats * 2]}, md,
                                     argv=["--out", out, "--threads", "1"])
            with open(out + ".json") as f:
                data = json.load(f)
            self.assertEqual(list(data), ["provenance", "threads", "repeats", "rows"])
            self.assertEqual((data["threads"], data["repeats"], data["rows"]), (1, 3, [6]))
            self.assertEqual(written, data)
            with open(out + ".md") as f:
                self.assertEqual(f.read(), "# x\n1 3 6\n")
            self.assertIn("1 3 6", printed.getvalue())

    def test_bench_main_needs(self):
        with self.assertRaises(SystemExit):
            bench_main("doc", "unused", 1, lambda a: {}, lambda r: "", needs=[("no/such/file", "hint")], argv=[])


class RepoModule(unittest.TestCase):
    def test_imports_a_file_once(self):
        m = repo_module("bench/liobench/tables.py")
        self.assertIs(m, repo_module("bench/liobench/tables.py"))
        self.assertEqual(m.md_table(["a"], []), ["| a |", "|---|"])
        self.assertIsNot(repo_module("bench/cpu_decode/run.py"), repo_module("bench/batched/run.py"))
        with self.assertRaises(FileNotFoundError):
            repo_module("bench/no_such_module.py")


if __name__ == "__main__":
    unittest.main()
