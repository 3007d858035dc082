"""Write steps of the client (the shim library, interpose/): its entry points and hook
table (shim_stubs.c), the prototypes of its hand-written parts (shim_impl.h), its symbol
table and the real driver's cuGetProcAddress answers (shim_symtab.c, shim_procaddr.c), and
its linker version script (shim_exports.map)."""

import os
import re

from common import HEADER, GenError, write
from emit_shared import hooks_of


def call_args(proto):
    return "(" + ", ".join(p.name for p in proto.params) + ")"


def write_stubs(out, described):
    """Every exported entry point: generic calls marshalled from their descriptors,
    hand-written ones (local/manual) wrapped around their shim_impl_ function, copies around
    one call of the copy engine (gen/copies.py) as theirs, twins around
    their target's, unsupported ones refused; all of them forwarded to the real driver
    instead when the process runs without a server (fallback). Then the client's hooks."""
    lines = ["/* %s */" % HEADER, '#include "interpose/stubs.h"', ""]
    for d in described:
        n, c = d.sym.name, d.sym.cls
        if c == "absent":
            continue
        if d.proto is None:
            lines.append("SHIM_UNSUPPORTED_NOPROTO(%s)" % n)
            continue
        p = d.proto
        ptds = 1 if "SHIM_CF_PTDS" in d.flags else 0
        if c == "twin" and d.twin.sym.cls in ("sync", "async"):
            addrs = ", ".join("&" + q.name for q in p.params)
            lines.append("SHIM_TWIN_GENERIC(%s, %s, %d, %s, (%s), %s)"
                         % (n, d.twin.sym.name, ptds, p.decl(), addrs, call_args(p)))
        elif c == "twin":
            lines.append("SHIM_TWIN(%s, %s, %d, %s, %s)"
                         % (n, d.twin.sym.name, ptds, p.decl(), call_args(p)))
        elif c in ("sync", "async"):
            if p.params:
                addrs = ", ".join("&" + q.name for q in p.params)
                lines.append("SHIM_GENERIC(%s, %s, (%s), %s)" % (n, p.decl(), addrs, call_args(p)))
            else:
                lines.append("SHIM_GENERIC0(%s)" % n)
        elif c == "copy":
            lines.append("SHIM_COPY_ENTRY(%s, %s, %s, %s)" % (n, p.decl(), call_args(p), d.copy))
        elif c == "unsupported":
            lines.append("SHIM_UNSUPPORTED(%s, %s, %s)" % (n, p.decl(), call_args(p)))
        else:
            lines.append("SHIM_ENTRY(%s, %s, %s)" % (n, p.decl(), call_args(p)))
    lines += ["", "/* Hand-written hooks of generic calls (interpose/<family>.c). */",
              "const struct shim_hook *const shim_hooks[SHIM_NCALLS] = {"]
    for d in described:
        if d.client_hook:
            lines.append("    [SHIM_ID_%s] = &shim_hook_%s," % (d.sym.name, d.client_hook))
    lines += ["};", ""]
    write(os.path.join(out, "shim_stubs.c"), "\n".join(lines))


def write_impl(out, described):
    """Prototypes of the hand-written implementations and hooks of the client, so the
    compiler checks each against cuda.h's."""
    lines = ["/* %s */" % HEADER, "#ifndef SHIM_IMPL_H", "#define SHIM_IMPL_H", "",
             "#define SHIM_IMPL(NAME) shim_impl_##NAME", ""]
    for d in described:
        if d.sym.cls in ("local", "manual", "copy"):
            lines.append("CUresult shim_impl_%s%s;" % (d.sym.name, d.proto.decl()))
    lines += ["", "struct shim_hook;"]
    lines += ["extern const struct shim_hook shim_hook_%s;" % h for h in hooks_of(described, "client")]
    lines += ["", "#endif", ""]
    write(os.path.join(out, "shim_impl.h"), "\n".join(lines))


def exported(described):
    return sorted(d.sym.name for d in described if d.sym.cls != "absent")


def write_symtab(out, described):
    names = exported(described)
    lines = ["/* %s */" % HEADER, '#include "interpose/symtab.h"', ""]
    lines += ["SHIM_SYMTAB_DECL(%s)" % n for n in names]
    lines += ["", "/* Sorted by name (strcmp order) for bsearch. */",
              "const struct shim_sym shim_symtab[] = {"]
    lines += ["    SHIM_SYMTAB_ENTRY(%s)," % n for n in sorted(names, key=lambda s: s.encode())]
    lines += ["};", "const size_t shim_nsymtab = sizeof(shim_symtab) / sizeof(shim_symtab[0]);", ""]
    write(os.path.join(out, "shim_symtab.c"), "\n".join(lines))


def write_procaddr(out, rows, described):
    known = set(exported(described))
    lines = ["/* %s */" % HEADER, '#include "channel/procaddr.h"', "",
             "/* The real driver's answers, sorted by (name, flags, version). */",
             "const struct shim_procaddr_row shim_procaddr_rows[] = {"]
    for name, flags, version, answer in sorted(rows, key=lambda r: (r[0].encode(), r[1], r[2])):
        if answer.startswith("none:"):
            m = re.match(r"none:r(-?\d+):s(-?\d+)$", answer)
            if not m:
                raise GenError("procaddress table: bad answer '%s' for %s" % (answer, name))
            lines.append('    {"%s", %d, %d, NULL, %s, %s},' % (name, flags, version, m.group(1), m.group(2)))
        else:
            if answer not in known:
                raise GenError("procaddress table: %s answers %s, which cuda_symbols.txt "
                               "does not export" % (name, answer))
            lines.append('    {"%s", %d, %d, "%s", 0, 0},' % (name, flags, version, answer))
    lines += ["};",
              "const size_t shim_nprocaddr_rows = sizeof(shim_procaddr_rows) / sizeof(shim_procaddr_rows[0]);",
              ""]
    write(os.path.join(out, "shim_procaddr.c"), "\n".join(lines))


def write_map(out, described):
    lines = ["/* %s */" % HEADER, "{", "  global:"]
    lines += ["    %s;" % n for n in exported(described)]
    lines += ["  local: *;", "};", ""]
    write(os.path.join(out, "shim_exports.map"), "\n".join(lines))
