#!/usr/bin/env python3
"""Turns one run of tools/bench/run.sh into docs/performance.md's benchmark table.

  report.py BENCH.json [--startup HYPERFINE.json] [--suite SUITE.txt]
            [--readme docs/performance.md [--chart docs/images/bench_ratios.svg]]

Prints every figure with its baseline (measured in the same run) and the
ratio, and with --readme rewrites the table between the markers
<!-- bench-table:begin --> and <!-- bench-table:end --> (each on a line
of its own) in that page, and with --chart redraws the chart of it.
With --benchmark_repetitions=N the figure is the median of the N runs and
the spread (min-max of the ratio) is shown next to it.
"""

import argparse
import json
import os
import re
import statistics
import sys

BEGIN = "<!-- bench-table:begin -->"
END = "<!-- bench-table:end -->"


def load_runs(path):
    """name -> list of per-repetition benchmark dicts (aggregates dropped)."""
    with open(path) as f:
        data = json.load(f)
    runs = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        runs.setdefault(b["run_name"], []).append(b)
    return data["context"], runs


def fmt_ns(ns):
    if ns >= 1e6:
        return "%.2f ms" % (ns / 1e6)
    if ns >= 1e3:
        return "%.2f us" % (ns / 1e3)
    return "%.1f ns" % ns


class Table:
    def __init__(self, runs):
        self.runs = runs
        self.rows = []
        self.missing = []

    def values(self, name, key):
        return [r[key] for r in self.runs.get(name, []) if key in r]

    def add(self, figure, value, baseline_label, baseline, ratios, target,
            met):
        """ratios: one per repetition (the ratio shown is their median)."""
        ratio = statistics.median(ratios)
        spread = ""
        if len(ratios) > 1:
            spread = " (%.2f-%.2f)" % (min(ratios), max(ratios))
        verdict = ""
        if target:
            verdict = "%s: %s" % (target, "met" if met(ratio) else "missed")
        self.rows.append((figure, value, baseline_label + " " + baseline,
                          "%.2f%s" % (ratio, spread), verdict))

    def ns_figure(self, figure, name, base_key, baseline_label, target=None,
                  met=None, invert=False):
        ns = self.values(name, "ns_per_op")
        base = self.values(name, base_key)
        if not ns or not base:
            self.missing.append(name)
            return
        ratios = [(b / n) if invert else (n / b) for n, b in zip(ns, base)]
        self.add(figure, fmt_ns(statistics.median(ns)), baseline_label,
                 fmt_ns(statistics.median(base)), ratios, target, met)

    def pair_figure(self, figure, name, base_name, baseline_label,
                    target=None, met=None):
        ns = self.values(name, "ns_per_op")
        base = self.values(base_name, "ns_per_op")
        if not ns or not base:
            self.missing.append(name)
            return
        ratios = [n / b for n, b in zip(ns, base)] if len(ns) == len(
            base) else [statistics.median(ns) / statistics.median(base)]
        self.add(figure, fmt_ns(statistics.median(ns)), baseline_label,
                 fmt_ns(statistics.median(base)), ratios, target, met)


def build(context, runs, startup, suite):
    t = Table(runs)
    t.ns_figure("round trip at 64 B (post, `Step`, both completions polled, "
                "receive re-posted)", "BM_RoundTrip/64", "model_ns",
                "model", "<= 3x", lambda r: r <= 3.0)
    t.pair_figure("the model with one mutex taken per call",
                  "BM_ModelRoundTripLocked/64", "BM_ModelRoundTrip/64",
                  "model")
    for size, label, target in ((4096, "4 KiB", None),
                                (65536, "64 KiB", ">= 0.9"),
                                (1048576, "1 MiB", ">= 0.9")):
        name = "BM_RoundTrip/%d" % size
        t.ns_figure("round trip at %s" % label, name, "memcpy_ns", "memcpy",
                    target, (lambda r: r >= 0.9) if target else None,
                    invert=True)
    t.pair_figure("rpma layer alone (the four calls over a no-op data path)",
                  "BM_RpmaLayer", "BM_VerbsCalls", "bare virtual calls")
    one = "BM_Scaling/pairs:1/active:1"
    for pairs, active in ((10, 10), (100, 100), (1000, 1000), (10000, 10000),
                          (10000, 16)):
        name = "BM_Scaling/pairs:%d/active:%d" % (pairs, active)
        target = "<= 4x" if (pairs, active) == (10000, 10000) else None
        t.pair_figure("%d pairs, %s in turn (VerbsBackend level)" %
                      (pairs, "all" if active == pairs else active),
                      name, one, "1 pair", target,
                      (lambda r: r <= 4.0) if target else None)
    big = t.runs.get("BM_Scaling/pairs:10000/active:10000")
    if big:
        heap = statistics.median(b["heap_bytes_per_qp"] for b in big)
        rss = statistics.median(b["rss_bytes_per_qp"] for b in big)
        t.rows.append(("memory per QP at 10 000 pairs in use (heap / RSS "
                       "delta after one write per pair, both sides, CQ each)", "%.0f B / %.0f B" % (heap, rss),
                       "1 KB", "%.2f" % (heap / 1000.0),
                       "<= 1 KB: %s" % ("met" if heap <= 1000 else "missed")))
    threads = [(n, t.values("BM_Threads/real_time/threads:%d" % n,
                            "real_time")) for n in (1, 2, 4)]
    if all(v for _, v in threads):
        one_t = statistics.median(threads[0][1])
        for n, v in threads[1:]:
            med = statistics.median(v)
            t.rows.append(("%d threads, own connection each (wall time per "
                           "op, all threads)" % n, fmt_ns(med),
                           "1 thread " + fmt_ns(one_t), "%.2f" % (med / one_t),
                           ""))
    if startup:
        # CPU time (user + system) of the process, as hyperfine measures it:
        # wall time of a 1-2 ms process on a shared machine is mostly the
        # neighbours (its spread is larger than its mean).
        by_name = {r["command"]: r for r in startup["results"]}
        true = by_name.get("/bin/true")
        cpu = lambda r: r["user"] + r["system"]
        for command, r in by_name.items():
            if command == "/bin/true" or true is None:
                continue
            help_run = command.endswith("--help")
            label = ("scenario runner start-up (`scenario --help`), CPU time"
                     if help_run else
                     "scenario runner, happy_path.yaml, whole run, CPU time")
            t.add(label, "%s (wall %s)" % (fmt_ns(cpu(r) * 1e9),
                                           fmt_ns(r["mean"] * 1e9)),
                  "/bin/true", "%s (wall %s)" % (fmt_ns(cpu(true) * 1e9),
                                                 fmt_ns(true["mean"] * 1e9)),
                  [cpu(r) / cpu(true)], "<= 2x" if help_run else None,
                  (lambda x: x <= 2.0))
    if suite:
        t.rows.append(suite)
    return t


def parse_suite(path):
    with open(path) as f:
        text = f.read()
    m = re.search(r"suite_seconds=([0-9.]+)", text)
    slow = re.search(r"slowest=(\S+) ([0-9.]+)", text)
    if not m:
        return None
    secs = float(m.group(1))
    value = "%.1f s" % secs
    if slow:
        value += " (slowest: `%s` %s s)" % (slow.group(1), slow.group(2))
    return ("`bazel test //...` warm, `--nocache_test_results`", value,
            "15 s", "%.2f" % (secs / 15.0),
            "<= 15 s: %s" % ("met" if secs <= 15.0 else "missed"))


def render(context, t):
    lines = [
        "Generated by `tools/bench/run.sh` (%s; %d CPUs at %.0f MHz, load "
        "average %s; thread CPU time unless noted)." %
        (context.get("date", "?"), context.get("num_cpus", 0),
         context.get("mhz_per_cpu", 0),
         " / ".join("%.1f" % x for x in context.get("load_avg", []))),
        "",
        "| figure | measured | baseline (same run) | ratio | target |",
        "|---|---|---|---|---|",
    ]
    for row in t.rows:
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench_json")
    ap.add_argument("--startup")
    ap.add_argument("--suite")
    ap.add_argument("--readme", help="the page whose bench-table to rewrite (docs/performance.md)")
    ap.add_argument("--chart", help="with --readme: redraw this SVG from the new table (tools/bench/chart.py)")
    args = ap.parse_args()
    context, runs = load_runs(args.bench_json)
    startup = None
    if args.startup:
        with open(args.startup) as f:
            startup = json.load(f)
    suite = parse_suite(args.suite) if args.suite else None
    t = build(context, runs, startup, suite)
    table = render(context, t)
    sys.stdout.write(table)
    if t.missing:
        sys.stderr.write("not in this run: %s\n" % ", ".join(t.missing))
    if args.readme:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import chart
        with open(args.readme) as f:
            text = f.read()
        try:
            head, _, tail = chart.split_at_markers(text)
        except ValueError as e:
            sys.stderr.write("%s: %s\n" % (args.readme, e))
            return 2
        text = head + BEGIN + "\n" + table + END + tail
        with open(args.readme, "w") as f:
            f.write(text)
        sys.stderr.write("rewrote the table in %s\n" % args.readme)
        if args.chart:
            with open(args.chart, "w") as f:
                f.write(chart.svg(chart.rows_of(text)))
            sys.stderr.write("redrew %s\n" % args.chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
