#!/usr/bin/env python3
"""soak_report.py SAMPLES.CSV [--svg FILE] [--summary FILE]

Reads the per-second samples soak.sh took of its soak pair (RSS, fds,
threads of the server and the client; the client's and the server's
operation counts) and checks the drift bounds, one line each:

  MemoryFlat        each process's largest RSS in the last minute is no more
                    than its largest in the first two minutes + 1 MiB
                    (allocator slack; a leak of 2 KiB a second breaks it
                    within ten minutes)
  FdsFlat           each process's most fds in the last minute are no more
                    than its most in the first minute
  ThroughputSteady  the client's operations per second in every whole
                    minute are at least 90 % of the first minute's

"NAME held: ..." or "NAME broken: ...". Exit 0 when all hold, 1 when one
is broken, 2 on a bad input. --summary writes a Markdown table of the
figures (README's soak table); --svg draws RSS, fds and operations per
second against time.
"""
import argparse
import csv
import sys

SLACK_KB = 1024


def load(path):
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                rows.append({k: float(v) if v not in ("", None) else 0.0 for k, v in row.items()})
            except ValueError:
                sys.exit("soak_report: not a number in row %s" % row)
    if len(rows) < 120:
        print("soak_report: %d samples; two minutes at least are needed" % len(rows), file=sys.stderr)
        sys.exit(2)
    return rows


def window(rows, first, last):
    return [r for r in rows if first < r["t"] <= last]


def per_minute_rates(rows, key):
    """Operations per second in each whole minute."""
    by_t = {int(r["t"]): r[key] for r in rows}
    end = int(rows[-1]["t"])
    rates = []
    for m in range(end // 60):
        a, b = by_t.get(m * 60, 0.0 if m == 0 else None), by_t.get((m + 1) * 60)
        if a is None or b is None:
            continue
        rates.append((b - a) / 60.0)
    return rates


def check(rows):
    end = rows[-1]["t"]
    results, figures = [], []
    held = True
    # Memory.
    notes = []
    ok = True
    for side in ("server", "client"):
        k = side + "_rss_kb"
        early = max(r[k] for r in window(rows, 0, 120))
        late = max(r[k] for r in window(rows, end - 60, end))
        notes.append("%s %.1f -> %.1f MiB" % (side, early / 1024, late / 1024))
        figures.append(("%s RSS, max of the first 2 min / of the last min" % side,
                        "%.1f MiB / %.1f MiB" % (early / 1024, late / 1024)))
        ok &= late <= early + SLACK_KB
    results.append(("MemoryFlat", ok, ", ".join(notes) + " (bound: + 1 MiB)"))
    held &= ok
    # File descriptors.
    notes, ok = [], True
    for side in ("server", "client"):
        k = side + "_fds"
        early = max(r[k] for r in window(rows, 0, 60))
        late = max(r[k] for r in window(rows, end - 60, end))
        notes.append("%s %d -> %d" % (side, early, late))
        figures.append(("%s fds, most in the first / last minute" % side, "%d / %d" % (early, late)))
        ok &= late <= early
    results.append(("FdsFlat", ok, ", ".join(notes)))
    held &= ok
    # Throughput.
    rates = per_minute_rates(rows, "client_ops")
    if len(rates) < 2 or rates[0] <= 0:
        results.append(("ThroughputSteady", False, "fewer than two whole minutes with operations: %s" % rates))
        held = False
    else:
        worst, best = min(rates[1:]) / rates[0], max(rates[1:]) / rates[0]
        ok = worst >= 0.9
        results.append(("ThroughputSteady", ok,
                        "first minute %.0f ops/s, later minutes %.2f-%.2f of it (bound: >= 0.90)" %
                        (rates[0], worst, best)))
        figures.append(("client operations per second, first minute / later minutes",
                        "%.0f / %.0f-%.0f" % (rates[0], min(rates[1:]), max(rates[1:]))))
        held &= ok
    threads = {side: (min(r[side + "_threads"] for r in rows if r[side + "_threads"] > 0),
                      max(r[side + "_threads"] for r in rows))
               for side in ("server", "client")}
    for side, (lo, hi) in threads.items():
        figures.append(("%s threads, fewest / most" % side, "%d / %d" % (lo, hi)))
    figures.append(("operations in all (client / server)",
                    "%d / %d" % (rows[-1]["client_ops"], rows[-1]["server_ops"])))
    return held, results, figures, int(end)


def svg(rows, path):
    width, panel, left, top_pad = 760, 170, 70, 30
    panels = [
        ("RSS (MiB)", [("server_rss_kb", "#1f77b4", 1 / 1024.0), ("client_rss_kb", "#d62728", 1 / 1024.0)]),
        ("open fds", [("server_fds", "#1f77b4", 1), ("client_fds", "#d62728", 1)]),
        ("client operations / s (10 s mean)", [("rate", "#2ca02c", 1)]),
    ]
    # Operations per second, as a 10-second moving mean.
    ops = [r["client_ops"] for r in rows]
    for i, r in enumerate(rows):
        j = max(0, i - 10)
        dt = rows[i]["t"] - rows[j]["t"]
        r["rate"] = (ops[i] - ops[j]) / dt if dt > 0 else 0.0
    t_end = rows[-1]["t"]
    height = top_pad + len(panels) * (panel + 40) + 20
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="13">soak pair over %d s: server (blue), client (red)</text>' % (left, t_end)]
    plot_w = width - left - 20
    for p, (title, series) in enumerate(panels):
        y0 = top_pad + p * (panel + 40) + 15
        vals = [r[k] * s for k, _, s in series for r in rows]
        hi = max(vals) * 1.1 if vals and max(vals) > 0 else 1.0
        out.append('<text x="%d" y="%d">%s</text>' % (left, y0 - 4, title))
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>' % (left, y0, plot_w, panel))
        for frac in (0, 0.5, 1):
            y = y0 + panel - frac * panel
            out.append('<text x="%d" y="%.1f" text-anchor="end">%.4g</text>' % (left - 4, y + 4, hi * frac))
        for k, colour, scale in series:
            pts = " ".join("%.1f,%.1f" % (left + plot_w * r["t"] / t_end, y0 + panel - panel * r[k] * scale / hi)
                           for r in rows)
            out.append('<polyline fill="none" stroke="%s" stroke-width="1" points="%s"/>' % (colour, pts))
        for m in range(0, int(t_end) + 1, 60):
            x = left + plot_w * m / t_end
            out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (x, y0 + panel + 13, m))
    out.append('<text x="%d" y="%d">seconds</text>' % (left + plot_w // 2, height - 5))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("samples")
    ap.add_argument("--svg")
    ap.add_argument("--summary")
    args = ap.parse_args()
    rows = load(args.samples)
    held, results, figures, end = check(rows)
    for name, ok, text in results:
        print("%s %s: %s" % (name, "held" if ok else "broken", text))
    if args.summary:
        with open(args.summary, "w") as f:
            f.write("| soak, %d s | figure |\n|---|---|\n" % end)
            for name, value in figures:
                f.write("| %s | %s |\n" % (name, value))
            for name, ok, text in results:
                f.write("| %s | %s: %s |\n" % (name, "held" if ok else "**broken**", text))
    if args.svg:
        svg(rows, args.svg)
    sys.exit(0 if held else 1)


if __name__ == "__main__":
    main()
