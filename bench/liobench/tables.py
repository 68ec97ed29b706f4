"""Markdown tables, the shape every results .md uses."""


def md_table(header, rows, align=None):
    """Lines of a Markdown table: `header` (cell texts), the separator (`align`: one of "l", "r"
    per column, default "---" for every column) and one line per row of `rows` (each a sequence
    of cells, written with str())."""
    seps = ["---" if a is None or a == "l" else "---:" for a in (align or [None] * len(header))]
    if len(seps) != len(header):
        raise ValueError(f"md_table: {len(seps)} alignments for {len(header)} columns")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(seps) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return lines
