#!/usr/bin/env python3
"""Describe one CUDA call: `make describe NAME=cuFoo`.

Prints, one after another: the call's row in cuda_symbols.txt (and the rows that name it,
and the %handle/%range/%struct lines it uses), its prototype in cuda.h, what gen/checks.py's
describe() derives from them (each parameter's descriptor and its kind in gen/algebra.py,
the call's roles and flags), the generated code that carries it (from a fresh run of the
write steps into a temporary folder, so it is what the table says now, whatever build/
holds), and where its hand-written parts live. Runs gen.py's own parse and check steps
(load()): nothing here parses the table again.
Exits 1 for a name the table does not list (a name cuda.h declares but the table does not
list is built as unsupported, and is described as such).
"""

import argparse
import difflib
import glob
import os
import re
import signal
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen  # noqa: E402

# The classes in plain words (also gen/support.py's).
CLASS_WORDS = {
    "local": "answered in the client (interpose/), never sent to the server",
    "sync": "served by the server from its descriptor; the caller waits for the answer",
    "async": "served by the server from its descriptor; enqueued on its stream, the caller "
             "does not wait",
    "manual": "carried by hand-written code in interpose/ and server/ (a file named for its family)",
    "copy": "a copy: its entry point, generated from the row, runs the copy engine "
            "(interpose/memcpy.c) with the sides, extent and stream the row names",
    "twin": "another exported name for the call it is a twin of",
    "unsupported": "returns CUDA_ERROR_NOT_SUPPORTED (and logs its name once)",
    "absent": "not exported by the shim at all",
}

GEN_FILES = ("shim_ids.h", "shim_desc.c", "shim_stubs.c", "shim_impl.h", "srv_hooks.c",
             "srv_hooks.h", "shim_symtab.c", "shim_procaddr.c", "shim_exports.map")


def raw_line(path, lineno):
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if i == lineno:
                return line.rstrip("\n")
    return ""


def generated_lines(out, name):
    """The lines of each generated file that name the call, with the blocks they open
    (a parameter table runs to its `};`)."""
    word = re.compile(r"(?<![A-Za-z0-9])%s(?!\w)" % re.escape(name))
    found = []
    for fname in GEN_FILES:
        lines = open(os.path.join(out, fname)).read().split("\n")
        i = 0
        while i < len(lines):
            if word.search(lines[i]):
                block = [lines[i]]
                if lines[i].rstrip().endswith("{"):
                    while i + 1 < len(lines) and lines[i] != "};":
                        i += 1
                        block.append(lines[i])
                found.append((fname, block))
            i += 1
    return found


def structs_of(g, proto):
    """%struct lines describing a struct some pointer parameter passes (by any typedef)."""
    out = []
    if proto is None:
        return out
    for p in proto.params:
        if not p.is_pointer():
            continue
        elem = p.pointee()
        rec = g.model.ctypes.resolve(elem)[1] if g.model.ctypes.is_record(elem) else None
        if rec is None:
            continue
        for s in g.model.structs.values():
            if s not in out and (s.name == elem or g.model.ctypes.resolve(s.name)[1] is rec):
                out.append(s)
    return out


def types_of(g, d):
    """%handle/%range lines of the types the call's parameters and notes name."""
    out = []
    names = set()
    if d.proto is not None:
        for p in d.proto.params:
            names.add(p.ctype)
            if p.is_pointer():
                names.add(p.pointee())
    for key, _, _ in d.sym.notes:
        names.add(key)
    for t in g.model.types:
        if (t.kind == "handle" and t.name in names) or (t.kind == "range" and t.name in names):
            out.append(t)
        elif t.opts.get("destroy") == d.sym.name:
            out.append(t)
    return out


def hand_written(root, name, d):
    """Where the hand-written parts of the call are defined: file:line of each."""
    pats = []
    if d.sym.cls in ("local", "manual"):
        pats.append(("client implementation", r"SHIM_IMPL\(%s\)\(" % re.escape(name)))
    if d.copy:
        engine = d.copy.split("(", 1)[0]
        pats.append(("copy engine", r"^CUresult %s\(" % engine))
    if d.server_hook:
        pats.append(("server hook", r"const struct srv_hook srv_hook_%s\b" % d.server_hook))
    if d.client_hook:
        pats.append(("client hook", r"const struct shim_hook shim_hook_%s\b" % d.client_hook))
    found = []
    files = sorted(glob.glob(os.path.join(root, "interpose", "*.c")) +
                   glob.glob(os.path.join(root, "server", "**", "*.c"), recursive=True))
    for what, pat in pats:
        rx = re.compile(pat)
        hits = []
        for fn in files:
            for i, line in enumerate(open(fn), 1):
                if rx.search(line):
                    hits.append("%s:%d" % (os.path.relpath(fn, root), i))
        found.append((what, hits))
    impl = [v for k, v, _ in d.sym.notes if k == "impl"]
    if impl:
        found.append(("its row says", ["interpose/%s.c (impl:%s)" % (impl[0], impl[0])]))
    return found


def pname(d, i):
    return "%s (parameter %d)" % (d.proto.params[i].name, i) if i >= 0 else None


def describe_call(g, d, symbols, root, out, w):
    s = d.sym
    ids = {x.sym.name: i for i, x in enumerate(g.described)}
    if s.cls == "twin":
        w("== %s: twin of %s (%s)" % (s.name, d.twin.sym.name, d.twin.sym.cls))
        w("   another exported name for %s, which is %s" % (d.twin.sym.name, CLASS_WORDS[d.twin.sym.cls]))
    else:
        w("== %s: %s" % (s.name, s.cls))
        w("   %s" % CLASS_WORDS[s.cls])
    w("")
    w("-- cuda_symbols.txt")
    if s.lineno:
        w("%d: %s" % (s.lineno, raw_line(symbols, s.lineno)))
    else:
        w("(not listed: cuda.h declares it, so the generator builds it as unsupported, with a "
          "warning)")
    if s.cls == "twin":
        b = d.twin.sym
        w("%d: %s" % (b.lineno, raw_line(symbols, b.lineno)))
    others = [x.sym for x in g.described if x.sym is not s and any(
        (k in ("of", "via") and v == s.name) for k, v, _ in x.sym.notes)]
    for o in others:
        w("%d: %s" % (o.lineno, raw_line(symbols, o.lineno)))
    for t in types_of(g, d):
        w("%d: %s" % (t.lineno, raw_line(symbols, t.lineno)))
    for st in structs_of(g, d.proto):
        w("%d: %s" % (st.lineno, raw_line(symbols, st.lineno)))
    w("")
    w("-- cuda.h")
    if d.proto is None:
        w("(no prototype: the driver exports it, cuda.h does not declare it)")
    else:
        w("CUresult %s%s;" % (s.name, d.proto.decl()))
    w("")
    w("-- derived by gen/gen.py (gen/checks.py's describe())")
    w("call id   %d" % ids[s.name])
    if s.cls == "twin":
        w("twin of   %s (%s): its description is that call's (make describe NAME=%s)"
          % (d.twin.sym.name, d.twin.sym.cls, d.twin.sym.name))
    if d.params:
        notes = {}
        for key, n, count in s.notes:
            notes.setdefault(n, []).append("%s:%s%s" % (key, n, "[%s]" % count if count else ""))
        for i, (p, init) in enumerate(zip(d.proto.params, d.params)):
            w("param %d   %-40s %-28s -> %s (%s)" % (i, "%s %s" % (p.ctype, p.name),
                                                   " ".join(notes.get(p.name, [])) or "-", init,
                                                   d.kinds[i]))
    for label, i in (("stream", d.stream), ("destroys", d.destroys), ("parent", d.parent),
                     ("sync-if-host", d.host_sync), ("ctx-free", d.ctx_free),
                     ("loads-code", d.loads_code)):
        if i >= 0:
            w("%-12s %s" % (label, pname(d, i)))
    if d.copy:
        w("copy      %s" % d.copy)
    if d.via:
        w("via       %s (the server runs it, with the caller's default stream appended)" % d.via)
    if d.server_hook:
        w("server    srv_hook_%s" % d.server_hook)
    if d.client_hook:
        w("client    shim_hook_%s" % d.client_hook)
    if d.needed:
        w("needed    %s (outputs the server needs even when the caller passes NULL)"
          % ", ".join(pname(d, i) for i in sorted(d.needed)))
    w("flags     %s" % d.flag_text())
    for i, sp in enumerate(d.spans):
        w("span %d    %s" % (i, sp))
    w("")
    w("-- generated (build/gen/)")
    last = None
    for fname, block in generated_lines(out, s.name):
        if fname != last:
            w("%s:" % fname)
            last = fname
        for line in block:
            w("    " + line.strip())
    hw = hand_written(root, s.name, d)
    if hw:
        w("")
        w("-- hand-written")
        for what, hits in hw:
            w("%-22s %s" % (what, ", ".join(hits) or "(not found in interpose/ or server/)"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    gen.input_args(ap)
    ap.add_argument("name", nargs="?")
    a = ap.parse_args()
    if not a.name:
        sys.stderr.write("usage: make describe NAME=cuFoo (one CUDA driver call, or a "
                         "protocol operation, CHAN_OP_NAME)\n")
        return 2
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `make describe ... | head`
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        g = gen.load(a.cuda_include, a.symbols, a.procaddr, a.cc)
        by_name = {d.sym.name: d for d in g.described}
        d = by_name.get(a.name)
        op = gen.ops.find(g.ops, a.name)
        if op is not None:  # a protocol operation's %op row (gen/ops.py)
            with tempfile.TemporaryDirectory(prefix="mpsshim-describe.") as out:
                gen.write_all(g, out)
                gen.ops.describe(op, a.symbols, root, out, print)
            return 0
        if d is None:
            near = difflib.get_close_matches(a.name, list(by_name), n=4, cutoff=0.75)
            sys.stderr.write("%s: not in cuda_symbols.txt, nor declared in cuda.h: the shim "
                             "does not export it%s\n"
                             % (a.name, " (did you mean %s?)" % ", ".join(near) if near else ""))
            return 1
        with tempfile.TemporaryDirectory(prefix="mpsshim-describe.") as out:
            gen.write_all(g, out)
            describe_call(g, d, a.symbols, root, out, print)
    except gen.GenError as e:
        sys.stderr.write("gen/describe.py: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
