#!/usr/bin/env python3
"""api_abuse_compare.py KIND MINE THEIRS DIFFERENCES

Compares two outputs of tests/api_abuse.c: the same cases, the same
answers, except the case keys DIFFERENCES lists for KIND (lines
"KIND | KEY | why"); a listed key that answers the same fails too, so the
list stays true. A case key is a line's text before ": "; a key may repeat
(a post's answer and its completion), and all its answers are compared.
A crash compares as a crash whatever its signal: under AddressSanitizer a
NULL dereference is SIGABRT where it is SIGSEGV without.
"""
import re
import sys
from collections import defaultdict


def load(path):
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\r\n")
            if line.startswith("abuse "):
                key, _, answer = line.partition(": ")
                answer = re.sub(r"^crashed by signal [0-9]+", "crashed", answer)
                out.append((key, answer))
    return out


def listed_keys(path, kind):
    keys = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            fields = [x.strip() for x in line.split(" | ")]
            if len(fields) != 3 or not fields[2]:
                sys.exit("malformed line (KIND | KEY | why) in %s: %s" % (path, line))
            if fields[0] == kind:
                keys.add(fields[1])
    return keys


def main():
    kind, mine, theirs, diffs = sys.argv[1:5]
    listed = listed_keys(diffs, kind)
    a, b = load(mine), load(theirs)
    if not a or not b:
        sys.exit("no cases in %s" % (mine if not a else theirs))
    ga, gb = defaultdict(list), defaultdict(list)
    for k, v in a:
        ga[k].append(v)
    for k, v in b:
        gb[k].append(v)
    keys = list(dict.fromkeys([k for k, _ in b] + [k for k, _ in a]))
    bad, differ = [], set()
    for k in keys:
        if ga.get(k) != gb.get(k):
            differ.add(k)
            if k not in listed:
                bad.append("%s:\n    here:      %s\n    reference: %s" % (k, ga.get(k), gb.get(k)))
    for k in sorted(listed - differ):
        bad.append("%s: listed as a difference (%s) but answers the same" % (k, kind))
    order_a = [k for k in dict.fromkeys(k for k, _ in a) if k in gb]
    order_b = [k for k in dict.fromkeys(k for k, _ in b) if k in ga]
    if order_a != order_b:
        bad.append("the cases ran in another order")
    print("%s: %d cases compared, %d listed differences" % (kind, len(keys), len(differ)))
    if bad:
        print("\n".join(bad))
        sys.exit(1)


if __name__ == "__main__":
    main()
