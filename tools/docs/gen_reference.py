#!/usr/bin/env python3
"""gen_reference.py: docs/reference.md, generated from the code.

  tools/docs/gen_reference.py            print the reference
  tools/docs/gen_reference.py --write    write docs/reference.md
  tools/docs/gen_reference.py --check    exit 1 when docs/reference.md differs
                                         from what the code says (CI's docs
                                         stage and check_docs.py run this)

Sources, each the one place the fact is written:
  - version.bzl                                    the version
  - `// env RPMA_HARNESS_X=VALUE: text` comments   environment variables, at
    (continued by comment lines indented 2+)       the line that reads them;
                                                   every "RPMA_HARNESS_*"
                                                   string in C++ needs one
  - CheckKeys(...) lists and the Positive /        scenario and fault keys,
    Unsigned / OneOf / Bool / Text calls after     their types, ranges and
    them (tools/scenario/scenario_parser.cc,       choices; defaults from the
    faults/fault_rule_text.cc); the structs'       member initializers of the
    initializers (tools/scenario/scenario.h,       same name
    faults/fault_injection.h)
  - CheckNames() (check/checking_backend.cc)       usage-checker names
  - WcStatusNames() (faults/fault_rule_text.cc)    completion statuses
  - kUsage / the header comments of each tool      command lines, exit codes
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = "docs/reference.md"
SOURCE_DIRS = ["check", "crash", "faults", "mock", "nic", "rpma", "tests", "tools", "verbs_backend", "examples"]


class SourceError(Exception):
    pass


def read(path):
    return open(os.path.join(ROOT, path), encoding="utf-8").read()


def version():
    m = re.search(r'^RPMA_HARNESS_VERSION = "([^"]+)"', read("version.bzl"), re.M)
    if not m:
        raise SourceError("version.bzl: no RPMA_HARNESS_VERSION")
    return m.group(1)


def source_files():
    for top in SOURCE_DIRS:
        for d, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = sorted(x for x in dirs if x not in ("corpus", "testdata"))
            for f in sorted(files):
                if f.endswith((".cc", ".h", ".c", ".sh")) or f == "harness":
                    yield os.path.relpath(os.path.join(d, f), ROOT)


# ---- environment variables ------------------------------------------------

def environment():
    docs, used = {}, {}
    start = re.compile(r"^\s*(?://|#)\s*env (RPMA_HARNESS_[A-Z0-9_]+)(=\S+)?:\s*(.*)$")
    more = re.compile(r"^\s*(?://|#)\s{2,}(\S.*)$")
    for path in source_files():
        lines = read(path).split("\n")
        for i, line in enumerate(lines):
            for name in re.findall(r'"(RPMA_HARNESS_[A-Z0-9_]+)[="]', line):
                used.setdefault(name, set()).add(path)
            m = start.match(line)
            if not m:
                continue
            name, value, text = m.group(1), (m.group(2) or "")[1:], [m.group(3)]
            j = i + 1
            while j < len(lines) and more.match(lines[j]):
                text.append(more.match(lines[j]).group(1))
                j += 1
            if name in docs:
                raise SourceError("%s:%d: %s is documented twice (also %s)" % (path, i + 1, name, docs[name][2]))
            docs[name] = (value, " ".join(text), "%s:%d" % (path, i + 1))
    missing = sorted(set(used) - set(docs))
    if missing:
        raise SourceError("read but not documented (add a `// env NAME=VALUE: text` comment where it is "
                          "read): " + ", ".join("%s (%s)" % (n, ", ".join(sorted(used[n]))) for n in missing))
    return docs, used


# ---- scenario and fault keys ----------------------------------------------

def balanced_args(text, open_at):
    """The top-level arguments of the call whose '(' is at open_at."""
    depth, args, cur, i, in_str = 0, [], "", open_at, False
    while i < len(text):
        c = text[i]
        if in_str:
            cur += c
            if c == "\\":
                cur += text[i + 1]
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            cur += c
        elif c in "({[":
            depth += 1
            if depth > 1:
                cur += c
        elif c in ")}]":
            depth -= 1
            if depth == 0:
                args.append(cur.strip())
                return args
            cur += c
        elif c == "," and depth == 1:
            args.append(cur.strip())
            cur = ""
        else:
            cur += c
        i += 1
    return args


def number(expr):
    e = re.sub(r"(?<=\d)(ull|ul|u|ll)\b", "", expr.strip())
    e = e.replace("UINT64_MAX", str(2**64 - 1)).replace("UINT32_MAX", str(2**32 - 1))
    if not re.fullmatch(r"[\d\s<()*+-]+", e):
        return expr
    n = eval(e)  # digits and << only, checked above
    for p in range(10, 65):
        if n == 2**p and p >= 16:
            return "2^%d" % p
        if n == 2**p - 1 and p in (32, 64):
            return "2^%d - 1" % p
    return str(n)


def defaults(paths):
    out = {}
    for path in paths:
        for m in re.finditer(r"^\s+[\w:<>]+\s+(\w+)\s*=\s*([^;]+);[ \t]*(?://\s*(.*))?$", read(path), re.M):
            out.setdefault(m.group(1), (m.group(2).strip(), (m.group(3) or "").strip()))
    return out


PARSERS = {"Positive": "integer >= 1", "Unsigned": "integer >= 0", "Bool": "true / false",
           "Text": "text", "ParseCounts": "map: status name -> count", "Errno": "errno name or number"}


def pairs(arg):
    """[(name, value)] of an initializer list {{"name", value}, ...}."""
    return re.findall(r'\{\s*"([^"]+)"\s*,\s*([^{}]+?)\s*\}', arg)


def describe(call, args):
    """(type, range, {value: name}) of one parser call."""
    kind = PARSERS.get(call.split("<")[0], "")
    if call.startswith("OneOf"):
        if len(args) >= 3 and "Names()" in args[2]:
            return "one of the completion statuses below", "", {}
        p = pairs(args[2]) if len(args) >= 3 else []
        return "one of: " + ", ".join("`%s`" % n for n, _ in p), "", {v: n for n, v in p}
    if call in ("Positive", "Unsigned") and len(args) >= 3 and not args[2].startswith('"'):
        return kind, "<= " + number(args[2]), {}
    return kind, "", {}


def enclosing_function(text, at):
    starts = [m for m in re.finditer(r"^[A-Za-z][\w:<>,\s&*]*?\b(\w+)\([^;{]*\)\s*\{", text[:at], re.M)]
    return starts[-1].group(1) if starts else ""


SECTIONS = {"ParsePeer": "client, server", "ParseWrite": "workload[i].write_with_imm",
            "ParseExpect": "expect", "ParseRoot": "top level", "Convert": "fault",
            "ParseCrash": "crash"}


def keys_of(path):
    """[(section, key, type, range, {value: name})] for each CheckKeys list in path."""
    text = read(path)
    out = []
    calls = [m for m in re.finditer(r"\bCheckKeys\(", text) if not re.match(r"void ", text[m.start() - 5:m.start()])]
    for m in calls:
        args = balanced_args(text, m.end() - 1)
        if len(args) < 3:
            continue
        keys = re.findall(r'"([^"]+)"', args[2])
        if not keys:  # a vector built above the call
            before = text[:m.start()]
            v = re.findall(r'std::vector<std::string> %s = \{([^}]*)\};' % re.escape(args[2]), before)
            pushed = re.findall(r'%s\.push_back\("([^"]+)"\)' % re.escape(args[2]), text[m.start() - 400:m.start()])
            keys = (re.findall(r'"([^"]+)"', v[-1]) if v else []) + pushed
        fn = enclosing_function(text, m.start())
        section = SECTIONS.get(fn, fn)
        if args[1].startswith("where") and fn == "ParseRoot":
            section = "workload[i]"
        body = text[m.end():]
        fn_end = re.search(r"\n}\n", body)
        body = body[:fn_end.start()] if fn_end else body
        for key in keys:
            kinds, rng, names = [], "", {}
            for c in re.finditer(r"\b(Positive|Unsigned|OneOf(?:<[^>(]*>)?|Bool|Text|ParseCounts|Errno)\(", body):
                a = balanced_args(body, c.end() - 1)
                if len(a) >= 2 and re.search(r'(?:^|[".])%s"' % re.escape(key), a[1]):
                    k, r, n = describe(c.group(1), a)
                    if k not in kinds:
                        kinds.append(k)
                    rng, names = rng or r, {**names, **n}
            said = re.search(r'"(?:[\w.]*\.)?%s: expected ([^"]+)"' % re.escape(key), body)
            if said and (not kinds or kinds == ["text"]):
                kinds = [said.group(1)]
            if not kinds and key == "probability" and "ParseProbability(" in body:
                kinds = ["number from 0 to 1"]
            if re.search(r"missing '%s'" % re.escape(key), body):
                names = {"required": True}
            out.append((section, key, "; or ".join(kinds), rng, names))
    return out


# ---- names from tables ----------------------------------------------------

def string_table(path, function):
    text = read(path)
    m = re.search(re.escape(function) + r"\(\)\s*\{(.*?)\n\}", text, re.S)
    if not m:
        raise SourceError("%s: no %s()" % (path, function))
    return re.findall(r'\{?"([^"]+)"', m.group(1))


def header_comment(path, prefix="#"):
    out = []
    for i, line in enumerate(read(path).split("\n")):
        if i == 0 and line.startswith("#!"):
            continue
        if line.startswith(prefix):
            out.append(line[len(prefix):][1:] if line[len(prefix):].startswith(" ") else line[len(prefix):])
        elif out:
            break
    return "\n".join(out).rstrip()


def usage_string(path, name):
    text = read(path)
    m = re.search(r"constexpr char %s\[\] =(.*?);\n" % name, text, re.S)
    if not m:
        raise SourceError("%s: no %s" % (path, name))
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1))
    return "".join(parts).encode().decode("unicode_escape").rstrip()


def docstring(path):
    m = re.search(r'^"""(.*?)"""', read(path), re.S | re.M)
    return m.group(1).strip() if m else ""


def default(found, names):
    if names.get("required") is True:
        return "required"
    if not found:
        return ""
    expr, note = found
    shown = shown_value(expr, names)
    return shown + (" (%s)" % note.replace("|", "\\|") if re.search(r"\b0:", note) else "")


def shown_value(expr, names):
    if expr in names:
        return "`%s`" % names[expr]
    if re.fullmatch(r"IBV_WC_\w+", expr):
        return "`%s`" % expr[len("IBV_WC_"):]
    if re.fullmatch(r"[\d\s*<ul]+", expr):
        return "`%s`" % number(expr)
    return "`%s`" % expr


# ---- the page -------------------------------------------------------------

def generate():
    v = version()
    env, used = environment()
    lines = [
        "# Reference",
        "",
        "<!-- Generated by tools/docs/gen_reference.py from the code; do not edit. -->",
        "<!-- CI fails when this file differs from what the code says: run tools/docs/gen_reference.py --write. -->",
        "",
        "Everything here is generated from the source that decides it (the",
        "parsers' tables, the option definitions, the comments at the lines that",
        "read each variable), so it is what version %s does. The pages of" % v,
        "[docs/](../README.md#where-to-go-next) explain how to use each piece.",
        "",
        "- [Environment variables](#environment-variables)",
        "- [Scenario files](#scenario-files)",
        "- [Fault rules](#fault-rules)",
        "- [Usage-checker names](#usage-checker-names)",
        "- [Completion statuses](#completion-statuses)",
        "- [Command lines and exit codes](#command-lines-and-exit-codes)",
        "",
        "## Environment variables",
        "",
        "Read when the program makes its backend (the first librpma call), unless",
        "the row says otherwise. Rows marked *harness's own test* matter only to",
        "the harness's own test suite.",
        "",
        "| variable | value | meaning | read in |",
        "|---|---|---|---|",
    ]
    for name in sorted(env):
        value, text, where = env[name]
        readers = sorted(used.get(name, [])) or [where.split(":")[0]]
        text = text.replace("|", "\\|")
        lines.append("| `%s` | %s | %s | %s |" % (name, ("`%s`" % value.replace("|", "\\|")) if value else "",
                                                   text, ", ".join("`%s`" % r for r in readers)))
    scenario_defaults = defaults(["tools/scenario/scenario.h"])
    lines += ["", "## Scenario files", "",
              "The keys each mapping of a scenario file accepts (any other key is an",
              "error naming the allowed ones), from `tools/scenario/scenario_parser.cc`;",
              "defaults from `tools/scenario/scenario.h`. Numbers may be decimal or `0x` hex.",
              "A `faults:` entry takes the keys of [Fault rules](#fault-rules).", ""]
    lines += ["| mapping | key | type | range | default |", "|---|---|---|---|---|"]
    field_of = {"schedule": "random_schedule", ("crash", "expect"): "outcome"}
    for section, key, kind, rng, names in keys_of("tools/scenario/scenario_parser.cc"):
        field = field_of.get((section, key), field_of.get(key, key))
        lines.append("| %s | `%s` | %s | %s | %s |" % (
            section, key, kind or "mapping (the rows of that name)", rng,
            default(scenario_defaults.get(field, ""), names)))
    fault_defaults = defaults(["faults/fault_injection.h"])
    lines += ["", "## Fault rules", "",
              "One entry of a scenario's `faults:` list or of an `RPMA_HARNESS_FAULTS` file",
              "(there without `side` and `connection`), from `faults/fault_rule_text.cc`;",
              "defaults from `FaultRule` in `faults/fault_injection.h`.",
              "`rpma-harness-scenario --check-faults FILE` parses a file without running it.", "",
              "| key | type | range | default |", "|---|---|---|---|"]
    field_of = {"steps": "delay_steps", "bytes": "torn_bytes", "errno": "error", "on": "call"}
    for section, key, kind, rng, names in keys_of("faults/fault_rule_text.cc"):
        lines.append("| `%s` | %s | %s | %s |" % (
            key, kind or "text", rng, default(fault_defaults.get(field_of.get(key, key), ""), names)))
    lines += ["", "## Usage-checker names", "",
              "For `RPMA_HARNESS_CHECK`, `--check=LIST`, a scenario's `check:` and",
              "`expect: {findings: ...}`, from `CheckNames()` in `check/checking_backend.cc`:", ""]
    lines += [", ".join("`%s`" % n for n in string_table("check/checking_backend.cc", "CheckNames"))]
    statuses = string_table("faults/fault_rule_text.cc", "WcStatusNames")
    lines += ["", "## Completion statuses", "",
              "The names a fault's `status:` and a scenario's `expect: {client: ..., server: ...}`",
              "take (`IBV_WC_` left off), from `WcStatusNames()` in `faults/fault_rule_text.cc`:", "",
              ", ".join("`%s`" % n for n in statuses)]
    lines += ["", "## Command lines and exit codes", ""]
    tools = [
        ("tools/harness", "the entry point (`tools/harness --help`)", header_comment("tools/harness")),
        ("rpma-harness-scenario", "the scenario runner: `bazel run //tools:scenario --`, `tools/harness run`, "
         "`PREFIX/bin/rpma-harness-scenario` in an install tree", usage_string("tools/scenario/scenario_main.cc", "kUsage")),
        ("multiprocess", "the launcher: `bazel run //tools/multiprocess:multiprocess --`, `tools/harness pair`",
         header_comment("tools/multiprocess/launcher_main.cc", "//")),
        ("crash_check", "crash consistency of a journalled run: `bazel run //tools/crash_check --`, "
         "`tools/harness crash-check`, `PREFIX/bin/rpma-harness-crash-check`",
         header_comment("tools/crash_check/crash_check_main.cc", "//")),
        ("tools/softroce_vm/run.sh", "test binaries and pairs on rxe in a VM", header_comment("tools/softroce_vm/run.sh")),
        ("tools/fuzz/run.sh", "the fuzzers", header_comment("tools/fuzz/run.sh")),
        ("tools/bench/run.sh", "the benchmarks", header_comment("tools/bench/run.sh")),
        ("tools/docs/check_docs.py", "the docs test", docstring("tools/docs/check_docs.py")),
        ("tools/docs/gen_reference.py", "this page", docstring("tools/docs/gen_reference.py")),
    ]
    for name, what, text in tools:
        lines += ["### %s" % name, "", what[0].upper() + what[1:] + ".", "", "```", text, "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def main():
    try:
        text = generate()
    except SourceError as e:
        print("gen_reference: %s" % e, file=sys.stderr)
        return 2
    path = os.path.join(ROOT, OUT)
    if "--write" in sys.argv:
        open(path, "w", encoding="utf-8").write(text)
        print("gen_reference: wrote %s" % OUT)
        return 0
    if "--check" in sys.argv:
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        if old != text:
            print("gen_reference: %s differs from what the code says; run tools/docs/gen_reference.py --write"
                  % OUT, file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
