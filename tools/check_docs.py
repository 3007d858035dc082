#!/usr/bin/env python3
"""Checks the user docs' links and named paths (CI row docs-links).

usage: check_docs.py FILE.md...  (run from the repository root)

In each file, outside fenced code: every relative link [text](target) names a file or
folder that exists, and a #anchor names a heading of its target (GitHub's anchors); every
path in backticks that starts with a top folder of the tree (`server/core/spin.c`) exists.
Prints one line per dead link or path, naming file and line; exits 1 if there was any.
"""
import glob
import os
import re
import sys

# Top folders whose paths the docs name; a backticked path under build/ or elsewhere is
# an example or an installed location, not a file of the tree.
TREE = ("bench/", "channel/", "debian/", "demo/", "docs/", "gen/", "interpose/", "ops/",
        "server/", "tests/", "tools/")


def anchor(title):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    t = title.strip().lower().replace("`", "")
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


def anchors(path):
    seen, out, fence = {}, set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        m = re.match(r"^#+ (.*)", line)
        if m and not fence:
            a = anchor(m.group(1))
            n = seen.get(a, 0)
            seen[a] = n + 1
            out.add(a if n == 0 else "%s-%d" % (a, n))
    return out


def built_from(name):
    """NAME exists, or is a program or object built from a source of its stem
    (`bench/overlap` from bench/overlap.c, `bench/spin.ptx` from bench/spin.cu)."""
    return os.path.exists(name) or bool(glob.glob(os.path.splitext(name)[0] + "*"))


def check(path):
    bad, fence = [], False
    here = os.path.dirname(path)
    for no, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(here, file)) if file else path
            if not os.path.exists(dest):
                bad.append("%s:%d: dead link %s" % (path, no, target))
            elif frag and dest.endswith(".md") and frag not in anchors(dest):
                bad.append("%s:%d: no heading #%s in %s" % (path, no, frag, dest))
        for name in re.findall(r"`([^`\s]+)`", line):
            name = name.rstrip(".,:;")
            if name.startswith(TREE) and not re.search(r"[*<>{}$]", name) \
                    and not built_from(name):
                bad.append("%s:%d: no such path %s" % (path, no, name))
    return bad


def main():
    bad = [b for p in sys.argv[1:] for b in check(p)]
    print("\n".join(bad) if bad else "docs: every link and path of %d files found" % (len(sys.argv) - 1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
