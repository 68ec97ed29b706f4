#!/usr/bin/env python3
"""Fills the measured numbers of the lessons and the README from bench/results, so that no
measured number is typed by hand (COURSE.md, "Performance method").

    .venv/bin/python scripts/render_docs.py            # rewrite every stale block in place
    .venv/bin/python scripts/render_docs.py --check    # exit 1 and print a unified diff if any block is stale
    .venv/bin/python scripts/render_docs.py --self-test

Files: README.md, docs/*.md and bench/results/*.md (or the paths given), relative to the
repository root (--root). Templates are Jinja2 (scripts/requirements.txt pins it; the venv that
scripts/setup.sh makes has it), in its sandbox; the functions they call are in
scripts/render_fns.py, tested by scripts/test_render_fns.py.

Markers
-------
A block is an HTML comment naming what to render, the rendered text, and a closing comment.
Markdown hides the comments; this script rewrites only what lies between them.

Table (one row of output per element of `rows`):

    <!-- render: table bench/results/02_mla_cpu.json
    let rows = stack.decode
    | context | naive tok/s | absorbed tok/s | absorbed / naive |
    |---:|---:|---:|---:|
    | {{ context }} | {{ naive_tokens_per_s | fmt('.1f') }} | {{ absorbed_tokens_per_s | fmt('.1f') }} | {{ (absorbed_tokens_per_s / naive_tokens_per_s) | fmt('.1f') }}x |
    -->

    | context | naive tok/s | ...                   (generated; do not edit)
    <!-- /render -->

Text (evaluated once; inline on one line, or as a block like the table):

    ... decodes <!-- render: text q=bench/results/03_quantization_cpu.json {{ (q8_b1 / f32_b1) | fmt('.2f') }}x -->1.99x<!-- /render --> faster

File scope (names visible to every later marker of the same file; nothing is rendered):

    <!-- render: let q=bench/results/03_quantization_cpu.json
    let f32_b1 = find(q.variants, variant='f32').decode_tokens_per_s_b1
    -->

The words after `render: KIND` on the marker's first line are sources, up to the first word
that is not one (further lines made only of sources, before any template line, add more): `NAME=PATH` binds the loaded file to NAME; a bare `PATH` also spreads its
top-level keys as names (as `stack` above). PATH is relative to the root and ends in .json
(parsed as is) or .csv (a list of rows; numbers, true / false and nan converted). The rest of
the marker is the template. `let NAME = EXPR` lines bind names, in order, to the value of a
Jinja2 expression; a table needs `rows`. In a table template the lines up to the `|---|`
separator are the header, written once; the lines after it are written once per row, with the
row's keys as names (and `row` for the row itself). Each template line is a Jinja2 template:
`{{ EXPR }}` prints a value (None prints as `-`), `{{ EXPR | fmt('SPEC') }}` formats it by a
Python format spec (`.2f`, `,.0f`, `.1%`; parenthesize an EXPR with operators: filters bind
first). An unknown name or key is an error, never an empty cell. Dict keys read as attributes
(`v.perplexity`) or, when they are not identifiers, as `v['S_TG t/s']`. An expression that needs
a comprehension, a lambda or more than a line is a named function in scripts/render_fns.py
(a function of arguments is bound to the marker's names with `partial(f, a, b)`).

Names available in expressions: the sources and lets above, every function of render_fns
(its named functions and these helpers)
    find(seq, key=value, ...)   the one element whose keys have these values (an error if
                                none or several)
    where(seq, key=value, ...)  every such element, in order
    mib(n_bytes)                n_bytes / 2**20
    median, spread              statistics.median; (min, max)
    fmt(value, spec), partial   the format filter as a function; functools.partial
and abs, all, any, bool, dict, enumerate, float, int, len, list, max, min, range, round,
sorted, str, sum, tuple, zip.

An inline text marker must not start a line (Markdown would read the line as an HTML block).
A number that cannot be rendered stops the run with the file and line of its marker (exit 2).
"""
import argparse
import csv
import difflib
import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile

try:
    import jinja2
    import jinja2.sandbox
except ImportError:
    sys.exit("render_docs: needs Jinja2 (scripts/requirements.txt): run scripts/setup.sh, then "
             ".venv/bin/python scripts/render_docs.py")

import render_fns  # scripts/render_fns.py, beside this file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPEN = re.compile(r"<!--\s*render:\s*(table|text|let)\b")
CLOSE = "<!-- /render -->"
SOURCE = re.compile(r"^(?:([A-Za-z_]\w*)=)?([\w./+-]+\.(?:json|csv))$")
LET = re.compile(r"^\s*let\s+([A-Za-z_]\w*)\s*=\s*(.+?)\s*$")
SEPARATOR = re.compile(r"^\s*\|[\s:|-]+\|\s*$")
# Jinja2's sandbox: no private attributes, no unsafe calls; an unknown name is an error, never an
# empty cell; None prints as "-".
ENV = jinja2.sandbox.SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False,
                                          keep_trailing_newline=True,
                                          finalize=lambda v: "-" if v is None else v)
ENV.globals.update(render_fns.names())
ENV.filters["fmt"] = render_fns.fmt


class RenderError(Exception):
    """A marker that cannot be rendered: says which file and line."""


class Obj(dict):
    """A JSON object whose keys also read as attributes."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no key {name!r} (keys: {', '.join(map(str, self))})") from None


def wrap(value):
    if isinstance(value, dict):
        return Obj((k, wrap(v)) for k, v in value.items())
    if isinstance(value, list):
        return [wrap(v) for v in value]
    return value


def csv_cell(text):
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "nan":
        return math.nan
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def load_source(root, path, cache):
    full = os.path.join(root, path)
    if full not in cache:
        if not os.path.isfile(full):
            raise RenderError(f"source {path} does not exist")
        with open(full, encoding="utf-8") as f:
            if path.endswith(".csv"):
                cache[full] = [Obj((k, csv_cell(v)) for k, v in row.items()) for row in csv.DictReader(f)]
            else:
                cache[full] = wrap(json.load(f))
    return cache[full]


_EXPRESSIONS, _TEMPLATES = {}, {}


def evaluate(expr, scope):
    """The value of the Jinja2 expression `expr` with the names in `scope`; RenderError on failure."""
    expr = expr.strip()
    try:
        if expr not in _EXPRESSIONS:
            _EXPRESSIONS[expr] = ENV.compile_expression(expr, undefined_to_none=False)
        value = _EXPRESSIONS[expr](**scope)
        if isinstance(value, jinja2.Undefined):
            value._fail_with_undefined_error()
        return value
    except jinja2.TemplateSyntaxError as e:
        raise RenderError(f"cannot parse {expr!r}: {e.message}") from None
    except RenderError:
        raise
    except Exception as e:  # any failure names the expression
        raise RenderError(f"{expr!r}: {type(e).__name__}: {e}") from None


def fill(template, scope):
    """The template line rendered by Jinja2: every {{ EXPR }} (or {{ EXPR | fmt('SPEC') }}) replaced."""
    try:
        if template not in _TEMPLATES:
            _TEMPLATES[template] = ENV.from_string(template)
        return _TEMPLATES[template].render(scope)
    except jinja2.TemplateSyntaxError as e:
        raise RenderError(f"cannot parse {template!r}: {e.message}") from None
    except Exception as e:
        raise RenderError(f"{template!r}: {type(e).__name__}: {e}") from None


def bind_source(word, scope, root, cache):
    """NAME=PATH binds the file to NAME; a bare PATH spreads its keys (a CSV: `rows`)."""
    name, path = SOURCE.match(word).groups()
    data = load_source(root, path, cache)
    if name:
        scope[name] = data
    elif isinstance(data, dict):
        scope.update(data)
    else:
        scope["rows"] = data


def parse_marker(body, root, cache, scope):
    """Reads sources and lets into a new scope; returns (scope, template lines)."""
    first, _, rest = body.partition("\n")
    words = first.split()
    scope = dict(scope)
    n_sources = 0
    for w in words:
        if not SOURCE.match(w):
            break
        bind_source(w, scope, root, cache)
        n_sources += 1
    # The template starts after the sources, keeping its own spacing.
    head = first
    for w in words[:n_sources]:
        head = head[head.index(w) + len(w):]
    lines = ([head.strip()] if head.strip() else []) + rest.split("\n")
    template = []
    for k, line in enumerate(lines):
        m = LET.match(line)
        if m:
            scope[m.group(1)] = evaluate(m.group(2), scope)
        elif (k > 0 or not head.strip()) and not template and line.split() and all(SOURCE.match(w) for w in line.split()):
            for w in line.split():  # more sources, on lines of their own before the template
                bind_source(w, scope, root, cache)
        elif line.strip() or template:
            template.append(line)
    while template and not template[-1].strip():
        template.pop()
    return scope, template


def render_table(scope, template):
    if "rows" not in scope:
        raise RenderError("a table needs `let rows = ...` (or a .csv source)")
    header, body = [], template
    for k, line in enumerate(template):
        if SEPARATOR.match(line):
            header, body = template[:k + 1], template[k + 1:]
            break
    out = list(header)
    for row in scope["rows"]:
        row_scope = dict(scope, row=row)
        if isinstance(row, dict):
            row_scope.update(row)
        out.extend(fill(line, row_scope) for line in body)
    return out


def render_text(text, path, root, cache):
    """The file's text with every block re-rendered."""
    out, pos, scope = [], 0, {}
    while True:
        m = OPEN.search(text, pos)
        if not m:
            out.append(text[pos:])
            return "".join(out)
        line_no = text.count("\n", 0, m.start()) + 1
        end = text.find("-->", m.end())
        if end < 0:
            raise RenderError(f"{path}:{line_no}: marker without '-->'")
        kind, body = m.group(1), text[m.end():end]
        try:
            block_scope, template = parse_marker(body, root, cache, scope)
            if kind == "let":
                if template:
                    raise RenderError(f"a let marker renders nothing, but has {template[0]!r}")
                scope = block_scope
                out.append(text[pos:end + 3])
                pos = end + 3
                continue
            close = text.find(CLOSE, end)
            if close < 0:
                raise RenderError(f"no closing {CLOSE}")
            inline = "\n" not in body and text[end + 3:end + 4] != "\n"
            line_start = text.rfind("\n", 0, m.start()) + 1
            starts_line = not text[line_start:m.start()].strip()
            if inline:
                if "\n" in text[end:close]:
                    raise RenderError(f"an inline marker's {CLOSE} must be on the same line")
                if starts_line:
                    raise RenderError("an inline marker must not start a line (Markdown reads it as an HTML block)")
            elif not starts_line:
                raise RenderError("a marker inside a line must fit on that line (a block marker starts its own line)")
            lines = render_table(block_scope, template) if kind == "table" else [
                fill(line, block_scope) for line in template]
        except RenderError as e:
            raise RenderError(f"{path}:{line_no}: {e}") from None
        rendered = "".join(lines) if inline else "\n\n" + "\n".join(lines) + "\n\n"
        out.append(text[pos:end + 3] + rendered + CLOSE)
        pos = close + len(CLOSE)


def default_files(root):
    return [p for p in [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
            + sorted(glob.glob(os.path.join(root, "bench", "results", "*.md"))) if os.path.isfile(p)]


def run(root, files, check):
    """Renders (or checks) the files; returns the exit status."""
    cache, stale = {}, 0
    for path in files:
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            old = f.read()
        try:
            new = render_text(old, rel, root, cache)
        except RenderError as e:
            print(f"render_docs: {e}", file=sys.stderr)
            return 2
        if new == old:
            continue
        stale += 1
        if check:
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{rel}", f"b/{rel} (rendered)"))
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            print(f"render_docs: rewrote {rel}")
    if check and stale:
        print(f"render_docs: {stale} file(s) hold stale numbers; run .venv/bin/python scripts/render_docs.py",
              file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------------------------------------
# Self-test: proves that --check fails on a stale block and passes once it is rendered.

SELF_TEST_JSON = {"provenance": {"command": "bench_x --repeats 5", "commit": "0000000", "machine": "test",
                                 "date": "2026-01-01"},
                  "rows": [{"name": "a", "tps": 10.0}, {"name": "b", "tps": 25.0}]}
SELF_TEST_MD = """# Test

<!-- render: let r=bench/results/x.json
let base = find(r.rows, name='a').tps
-->

<!-- render: table bench/results/x.json
let rows = rows
| name | tok/s | vs a |
|---|---:|---:|
| {{ name }} | {{ tps | fmt('.1f') }} | {{ (tps / base) | fmt('.2f') }}x |
-->

| name | tok/s | vs a |
|---|---:|---:|
| a | 10.0 | 1.00x |
| b | 24.0 | 2.40x |

<!-- /render -->

b is <!-- render: text {{ (find(r.rows, name='b').tps / base) | fmt('.1f') }}x -->2.4x<!-- /render --> faster than a.
"""
SELF_TEST_FRESH = SELF_TEST_MD.replace("| b | 24.0 | 2.40x |", "| b | 25.0 | 2.50x |").replace(
    "-->2.4x<!--", "-->2.5x<!--")


def self_test():
    def call(root, *args):
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--root", root, *args],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return r.returncode, r.stdout + r.stderr

    def expect(cond, what, output=""):
        if not cond:
            sys.exit(f"self-test FAILED: {what}\n{output}")

    with tempfile.TemporaryDirectory(prefix="render_docs_") as root:
        os.makedirs(os.path.join(root, "bench", "results"))
        os.makedirs(os.path.join(root, "docs"))
        with open(os.path.join(root, "bench", "results", "x.json"), "w") as f:
            json.dump(SELF_TEST_JSON, f)
        md = os.path.join(root, "docs", "t.md")
        with open(md, "w") as f:
            f.write(SELF_TEST_MD)

        rc, out = call(root, "--check")
        expect(rc == 1, f"--check on a stale block exits 1 (got {rc})", out)
        for line in ("-| b | 24.0 | 2.40x |", "+| b | 25.0 | 2.50x |", "-->2.5x<!-- /render --> faster"):
            expect(line in out, f"the diff shows {line!r}", out)
        with open(md) as f:
            expect(f.read() == SELF_TEST_MD, "--check leaves the file alone")

        rc, out = call(root)
        expect(rc == 0, f"rendering exits 0 (got {rc})", out)
        with open(md) as f:
            got = f.read()
        expect(got == SELF_TEST_FRESH, "the rendered file holds the new numbers",
               "".join(difflib.unified_diff(SELF_TEST_FRESH.splitlines(True), got.splitlines(True))))
        rc, out = call(root, "--check")
        expect(rc == 0 and not out.strip(), f"--check passes after rendering (got {rc})", out)

        # A marker naming a missing key is an error, never a silently kept number.
        with open(md, "w") as f:
            f.write(SELF_TEST_MD.replace("{{ tps | fmt('.1f') }}", "{{ tokens_per_s | fmt('.1f') }}"))
        rc, out = call(root, "--check")
        expect(rc == 2 and "docs/t.md:7" in out and "tokens_per_s" in out,
               f"an unknown name exits 2 with the marker's line (got {rc})", out)
        # An inline marker at the start of a line would become an HTML block.
        with open(md, "w") as f:
            f.write("<!-- render: text {{ 1 + 1 }} -->2<!-- /render -->\n")
        rc, out = call(root, "--check")
        expect(rc == 2 and "must not start a line" in out, "an inline marker at a line start is refused", out)
        # A marker whose template spans lines inside a paragraph would split the paragraph.
        with open(md, "w") as f:
            f.write("b is <!-- render: text {{ 1 +\n1 }} -->2<!-- /render --> here.\n")
        rc, out = call(root, "--check")
        expect(rc == 2 and "must fit on that line" in out, "a multi-line marker inside a line is refused", out)
    print("render_docs self-test: ok (stale block caught, rendered, fresh; bad markers refused)")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", help="Markdown files (default: README.md, docs/*.md and bench/results/*.md)")
    ap.add_argument("--root", default=ROOT, help="repository root; sources and files are relative to it")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 with a diff if a block is stale")
    ap.add_argument("--self-test", action="store_true", help="check that --check catches a stale block")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    files = [os.path.join(a.root, f) for f in a.files] if a.files else default_files(a.root)
    return run(a.root, files, a.check)


if __name__ == "__main__":
    sys.exit(main())
