#!/usr/bin/env python3
"""chart.py: the benchmark table as a picture (an SVG bar chart of ratios).

  tools/bench/chart.py docs/performance.md docs/images/bench_ratios.svg

Reads the table tools/bench/report.py wrote between the bench-table markers
of the page and draws one bar per row: the ratio to its same-run baseline,
on a log scale, with the target where the row has one. report.py --readme
redraws it after rewriting the table; tools/docs/check_docs.py fails when
the committed picture is not what this script draws from the page.
"""

import math
import re
import sys

BEGIN = "<!-- bench-table:begin -->"
END = "<!-- bench-table:end -->"


def split_at_markers(markdown):
    """(head, table, tail): the markers count only on lines of their own."""
    m = re.search(r"^%s\n(.*?)^%s$" % (re.escape(BEGIN), re.escape(END)), markdown, re.S | re.M)
    if not m:
        raise ValueError("no %s ... %s lines" % (BEGIN, END))
    return markdown[:m.start()], m.group(1), markdown[m.end():]


def rows_of(markdown):
    table = split_at_markers(markdown)[1]
    rows = []
    for line in table.split("\n"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or cells[0] in ("figure", "---"):
            continue
        m = re.match(r"([0-9.]+)", cells[3])
        if not m:
            continue
        target = re.match(r"([<>]=)\s*([0-9.]+)\s*(x|s)?:\s*(met|missed)", cells[4])
        rows.append((re.sub(r"[`*]", "", cells[0]), float(m.group(1)), target))
    return rows


def esc(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def svg(rows):
    label_w, bar_w, row_h, top = 520, 360, 22, 40
    lo, hi = 0.1, 20.0
    def x(v):
        v = min(max(v, lo), hi)
        return label_w + bar_w * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
    height = top + row_h * len(rows) + 30
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="12">' % (label_w + bar_w + 90, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="8" y="18" font-size="14" font-weight="bold">rpma_bench: each figure against its '
           'baseline in the same run (ratio, log scale)</text>']
    for tick in (0.1, 0.3, 1, 3, 10):
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>' %
                   (x(tick), top - 6, x(tick), height - 24, "#444" if tick == 1 else "#ddd"))
        out.append('<text x="%.1f" y="%d" text-anchor="middle" fill="#666">%sx</text>' %
                   (x(tick), height - 10, ("%g" % tick)))
    for i, (label, ratio, target) in enumerate(rows):
        y = top + i * row_h
        short = label if len(label) <= 80 else label[:77] + "..."
        out.append('<text x="%d" y="%d" text-anchor="end">%s</text>' % (label_w - 8, y + 14, esc(short)))
        color = "#4a7bd0"
        if target:
            color = "#3a9d5d" if target.group(4) == "met" else "#d0664a"
        out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>' %
                   (min(x(1), x(ratio)), y + 3, abs(x(ratio) - x(1)), row_h - 6, color))
        out.append('<text x="%.1f" y="%d" fill="#222">%.2f</text>' % (max(x(1), x(ratio)) + 4, y + 14, ratio))
        if target and (target.group(3) or "x") == "x":
            tx = x(float(target.group(2)))
            out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#000" stroke-width="2" '
                       'stroke-dasharray="3,2"/>' % (tx, y + 1, tx, y + row_h - 1))
    out.append('<text x="8" y="%d" fill="#666">green: target met, red: missed (dashed: the target), '
               'blue: no target</text>' % (height - 10))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: chart.py PAGE.md OUT.svg\n")
        return 2
    with open(sys.argv[1]) as f:
        picture = svg(rows_of(f.read()))
    with open(sys.argv[2], "w") as f:
        f.write(picture)
    return 0


if __name__ == "__main__":
    sys.exit(main())
