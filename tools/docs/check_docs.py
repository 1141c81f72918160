#!/usr/bin/env python3
"""check_docs.py: the docs test. README.md and docs/*.md cannot lie.

Every fenced code block with a language tag in README.md and docs/*.md
carries a check marker as the second word of its info string:

  ```LANG file=PATH     the block's lines appear, in order and consecutively,
                        in the repository file PATH (each line's leading and
                        trailing whitespace and blank lines are ignored; a
                        line "..." or "// ..." or "# ..." skips any lines)
  ```yaml scenario      a complete scenario: the scenario runner runs it and
                        must exit 0 (`scenario exit=N`: must exit N)
  ```yaml faults        a complete RPMA_HARNESS_FAULTS file: it must parse
  ```c compile          a complete C (or ```cpp C++) translation unit,
                        compiled against the installed harness (pkg-config)
  ```c run              the same, then run: it must exit 0
  ```sh run             run from the repository root (bash -euo pipefail)
  ```sh tutorial        README's tutorial: every such block, in order, is one
                        script, run in a scratch HOME (--tutorial)
  ```LANG illustrative  not run (needs an RDMA host, the VM, a long mode)

Blocks without a language tag (or ```text) are output samples. Links
([text](target), images too) between the Markdown files of the repository
must resolve, anchors included (GitHub's heading slugs).

  tools/docs/check_docs.py                  markers, file= excerpts, links
  tools/docs/check_docs.py --prefix PREFIX  also compile/run C and C++,
                                            scenarios, fault files and
                                            `sh run` blocks against the
                                            install tree PREFIX
                                            (tools/harness install PREFIX)
  tools/docs/check_docs.py --tutorial       also README's tutorial, verbatim
  ... --regenerate                          draw the docs' generated pictures
                                            again and write them (the
                                            benchmark chart; with --prefix
                                            also PICTURES)

docs/reference.md must be what tools/docs/gen_reference.py makes of the
code, and each picture in PICTURES what the installed tools draw today.

The last line is "docs: N passed, N failed, N skipped" (one case per
checked block and per Markdown file's links).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Markdown files whose links are checked; blocks are checked in the first two.
BLOCK_FILES = ["README.md", "CHANGELOG.md"]
LINK_ONLY = ["nic/README.md", "tools/softroce_vm/README.md"]
OUTPUT_LANGS = {"", "text"}
# Pictures the docs show, drawn by the installed tools: (file, command with
# {scenario} for the scenario runner and {out} for the file to write).
PICTURES = [
    ("docs/images/rem_access_err_timeline.svg",
     ["{scenario}", "tools/scenarios/rem_access_err.yaml", "--quiet", "--timeline", "{out}"]),
]
MARKERS = {"file", "scenario", "faults", "compile", "run", "tutorial", "illustrative"}
ELLIPSIS = {"...", "// ...", "# ...", "/* ... */"}


class Block:
    def __init__(self, path, line, lang, marker, args, text):
        self.path, self.line, self.lang = path, line, lang
        self.marker, self.args, self.text = marker, args, text

    def where(self):
        return "%s:%d" % (self.path, self.line)


def markdown_files():
    files = [f for f in BLOCK_FILES if os.path.exists(os.path.join(ROOT, f))]
    docs = os.path.join(ROOT, "docs")
    if os.path.isdir(docs):
        files += sorted("docs/" + f for f in os.listdir(docs) if f.endswith(".md"))
    return files


def parse_blocks(path):
    """Fenced blocks of a Markdown file (fences may be indented, in lists)."""
    blocks, lines = [], open(os.path.join(ROOT, path), encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^( *)(```+|~~~+)\s*(.*)$", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).strip()
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not re.match(r"^ *" + re.escape(fence[0]) + "{%d,}\\s*$" % len(fence), lines[i]):
            line = lines[i]
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
            i += 1
        i += 1
        words = info.split()
        lang = words[0] if words else ""
        marker, args = None, {}
        for w in words[1:]:
            key, _, value = w.partition("=")
            if key in MARKERS and marker is None:
                marker = key
            args[key] = value
        blocks.append(Block(path, start, lang, marker, args, "\n".join(body) + "\n"))
    return blocks


def normalized(text):
    return [l.strip() for l in text.split("\n") if l.strip()]


def contains(haystack, needle):
    """needle's lines consecutively in haystack's; an ELLIPSIS line skips."""
    def match(h, n):
        if n == len(needle):
            return True
        if needle[n] in ELLIPSIS:
            return any(match(k, n + 1) for k in range(h, len(haystack) + 1))
        return h < len(haystack) and haystack[h] == needle[n] and match(h + 1, n + 1)
    return any(match(start, 0) for start in range(len(haystack)))


def slug(heading, seen):
    s = heading.strip().lower()
    s = re.sub(r"<[^>]+>", "", s)
    s = re.sub(r"[^\w\- ]", "", s)
    s = s.replace(" ", "-")
    n = seen.get(s, 0)
    seen[s] = n + 1
    return s if n == 0 else "%s-%d" % (s, n)


def anchors(path):
    seen, out, in_fence = {}, set(), False
    for line in open(path, encoding="utf-8"):
        if re.match(r"^ *(```|~~~)", line):
            in_fence = not in_fence
            continue
        m = None if in_fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            out.add(slug(m.group(1), seen))
    return out


def check_links(path):
    errors, text, in_fence = [], [], False
    for line in open(os.path.join(ROOT, path), encoding="utf-8"):
        if re.match(r"^ *(```|~~~)", line):
            in_fence = not in_fence
            text.append("")
            continue
        text.append("" if in_fence else re.sub(r"`[^`]*`", "", line))
    for lineno, line in enumerate(text, 1):
        for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", line):
            if re.match(r"^[a-z]+:", target):
                continue  # http(s), mailto: not reachable from here
            file_part, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(ROOT, os.path.dirname(path), file_part)) if file_part \
                else os.path.join(ROOT, path)
            if not full.startswith(ROOT) or not os.path.exists(full):
                errors.append("%s:%d: link to %s: no such file" % (path, lineno, target))
                continue
            if anchor and full.endswith(".md") and anchor not in anchors(full):
                errors.append("%s:%d: link to %s: no heading with that anchor" % (path, lineno, target))
    return errors


def run(cmd, cwd=ROOT, env=None, timeout=300, stdin=None):
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, stdin=stdin,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        return -1, "timed out after %d s\n%s" % (timeout, e.stdout or "")


class Checker:
    def __init__(self, args):
        self.args = args
        self.passed = self.failed = self.skipped = 0
        self.counts = {}
        self.tmp = tempfile.mkdtemp(prefix="check_docs.")

    def result(self, what, ok, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL %s\n%s" % (what, detail.rstrip()))

    def skip(self, what):
        self.skipped += 1
        if self.args.verbose:
            print("skip %s" % what)

    def pkg_env(self):
        env = dict(os.environ)
        env["PKG_CONFIG_PATH"] = os.path.join(self.args.prefix, "lib", "pkgconfig") + \
            (":" + env["PKG_CONFIG_PATH"] if env.get("PKG_CONFIG_PATH") else "")
        return env

    def check_block(self, b):
        what = "%s (```%s %s)" % (b.where(), b.lang, b.marker)
        self.counts[b.marker] = self.counts.get(b.marker, 0) + 1
        if b.marker == "file":
            target = os.path.join(ROOT, b.args["file"])
            if not os.path.isfile(target):
                return self.result(what, False, "no such file: %s" % b.args["file"])
            ok = contains(normalized(open(target, encoding="utf-8").read()), normalized(b.text))
            return self.result(what, ok, "these lines are not in %s:\n%s" % (b.args["file"], b.text))
        if b.marker in ("illustrative", "tutorial"):
            return None
        if not self.args.prefix:
            return self.skip(what)
        name = os.path.join(self.tmp, "block%d" % (self.passed + self.failed + self.skipped))
        if b.marker == "scenario":
            open(name + ".yaml", "w").write(b.text)
            want = int(b.args.get("exit") or 0)
            code, out = run([os.path.join(self.args.prefix, "bin", "rpma-harness-scenario"),
                             name + ".yaml", "--quiet"])
            return self.result(what, code == want, "exit %d, wanted %d:\n%s" % (code, want, out))
        if b.marker == "faults":
            open(name + ".yaml", "w").write(b.text)
            code, out = run([os.path.join(self.args.prefix, "bin", "rpma-harness-scenario"),
                             "--check-faults", name + ".yaml"])
            return self.result(what, code == 0, out)
        if b.lang in ("c", "cpp", "c++", "cc") and b.marker in ("compile", "run"):
            cxx = b.lang != "c"
            src = name + (".cc" if cxx else ".c")
            open(src, "w").write(b.text)
            pkgs = ["rpma-harness-gtest-main"] if cxx else ["rpma-harness"]
            code, flags = run(["pkg-config", "--cflags", "--libs"] + pkgs, env=self.pkg_env())
            if code != 0:
                return self.result(what, False, "pkg-config: " + flags)
            cmd = (["c++", "-std=c++17"] if cxx else ["cc", "-std=gnu11"]) + \
                ["-Wall", "-o", name, src] + flags.split()
            code, out = run(cmd)
            if code != 0 or b.marker == "compile":
                return self.result(what, code == 0, " ".join(cmd) + "\n" + out)
            code, out = run([name], cwd=self.tmp)
            return self.result(what, code == 0, "exit %d:\n%s" % (code, out))
        if b.lang in ("sh", "bash") and b.marker == "run":
            code, out = run(["bash", "-euo", "pipefail", "-c", b.text], stdin=subprocess.DEVNULL)
            return self.result(what, code == 0, "exit %d:\n%s" % (code, out))
        return self.result(what, False, "marker '%s' does not apply to ```%s" % (b.marker, b.lang))

    def generated_pictures(self):
        """Each picture drawn again must equal the committed one."""
        for path, command in PICTURES:
            out = os.path.join(self.tmp, os.path.basename(path))
            cmd = [a.format(scenario=os.path.join(self.args.prefix, "bin", "rpma-harness-scenario"), out=out)
                   for a in command]
            code, text = run(cmd)
            if code != 0 or not os.path.exists(out):
                self.result("%s drawn" % path, False, "%s: exit %d\n%s" % (" ".join(cmd), code, text))
                continue
            self.picture(path, open(out, "rb").read(), "what `%s` draws" % " ".join(command),
                         "tools/docs/check_docs.py --prefix PREFIX --regenerate")

    def picture(self, path, drawn, source, mend):
        """The committed picture at path must be `drawn` (--regenerate: write it)."""
        target = os.path.join(ROOT, path)
        if self.args.regenerate:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "wb").write(drawn)
            print("wrote %s" % path)
        same = os.path.exists(target) and open(target, "rb").read() == drawn
        self.result("%s is %s" % (path, source), same, "it differs: run %s" % mend)

    def tutorial(self, blocks):
        steps = [b for b in blocks if b.marker == "tutorial"]
        if not steps:
            return self.result("README.md tutorial", False, "no ```sh tutorial blocks")
        home = os.path.join(self.tmp, "home")
        os.makedirs(home)
        script = "set -x\n" + "".join("# %s\n%s" % (b.where(), b.text) for b in steps)
        env = dict(os.environ, HOME=home)
        env.pop("TEST_TMPDIR", None)
        print("tutorial: %d steps in HOME=%s" % (len(steps), home), flush=True)
        code, out = run(["bash", "-euo", "pipefail", "-c", script], env=env, timeout=1800,
                        stdin=subprocess.DEVNULL)
        open(os.path.join(self.tmp, "tutorial.log"), "w").write(out)
        self.result("README.md tutorial (%d steps)" % len(steps), code == 0,
                    "exit %d; the last lines:\n%s" % (code, "\n".join(out.split("\n")[-60:])))
        # Bazel servers the tutorial started stay up otherwise.
        for d, _, files in os.walk(home):
            if "WORKSPACE" in files:
                run(["bazel", "shutdown"], cwd=d, env=env, timeout=60)
        return code == 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--prefix", help="an install tree (tools/harness install PREFIX)")
    p.add_argument("--tutorial", action="store_true", help="also run README's tutorial")
    p.add_argument("--regenerate", action="store_true",
                   help="write the generated pictures (the chart; with --prefix also PICTURES) instead of failing")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    if args.prefix:
        args.prefix = os.path.abspath(args.prefix)
    c = Checker(args)
    all_blocks = []
    for path in markdown_files():
        blocks = parse_blocks(path)
        all_blocks += [b for b in blocks if path == "README.md"]
        for b in blocks:
            if b.lang in OUTPUT_LANGS:
                continue
            if b.marker is None:
                c.result("%s (```%s)" % (b.where(), b.lang), False,
                         "a ```%s block needs a check marker (file=PATH, scenario, faults, "
                         "compile, run, tutorial, illustrative): tools/docs/check_docs.py" % b.lang)
                continue
            if b.marker == "tutorial" and path != "README.md":
                c.result(b.where(), False, "```sh tutorial blocks belong in README.md")
                continue
            c.check_block(b)
    for path in markdown_files() + [f for f in LINK_ONLY if os.path.exists(os.path.join(ROOT, f))]:
        errors = check_links(path)
        c.result("%s links" % path, not errors, "\n".join(errors))
    # docs/reference.md is what tools/docs/gen_reference.py makes of the code.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gen_reference
    try:
        fresh = gen_reference.generate()
        old = open(os.path.join(ROOT, gen_reference.OUT), encoding="utf-8").read() \
            if os.path.exists(os.path.join(ROOT, gen_reference.OUT)) else ""
        c.result("%s is generated from the code" % gen_reference.OUT, fresh == old,
                 "it differs from what the code says: run tools/docs/gen_reference.py --write")
    except gen_reference.SourceError as e:
        c.result("%s is generated from the code" % gen_reference.OUT, False, str(e))
    # README names the version version.bzl holds.
    v = gen_reference.version()
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    named = set(re.findall(r"\bVersion (\d+\.\d+\.\d+)", readme))
    c.result("README.md names version %s (version.bzl)" % v, named == {v},
             "README.md says Version %s" % ", ".join(sorted(named)) if named else "README.md names no version")
    # The benchmark chart is drawn from performance.md's table.
    sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
    import chart
    page = open(os.path.join(ROOT, "docs", "performance.md"), encoding="utf-8").read()
    c.picture("docs/images/bench_ratios.svg", chart.svg(chart.rows_of(page)).encode(),
              "the chart of performance.md's table",
              "tools/bench/chart.py docs/performance.md docs/images/bench_ratios.svg")
    if args.prefix:
        c.generated_pictures()
    if args.tutorial:
        c.tutorial(all_blocks)
    shutil.rmtree(c.tmp, ignore_errors=True)
    print("docs: blocks by marker: %s" % ", ".join("%s %d" % kv for kv in sorted(c.counts.items())))
    print("docs: %d passed, %d failed, %d skipped" % (c.passed, c.failed, c.skipped))
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
