"""Parse step of cuda_symbols.txt: the rows (name, class, notes: Symbol), the %handle and
%range lines (ObjType), the %struct lines (StructDesc), and the real driver's
cuGetProcAddress answers (the procaddress table). Shape only: what a row means is
gen/checks.py's. %op rows are gen/ops.py's."""

import re

from common import GenError


CLASSES = ("local", "sync", "async", "copy", "manual", "twin", "unsupported", "absent")


class Symbol:
    def __init__(self, name, cls, notes, lineno):
        self.name = name
        self.cls = cls
        self.notes = notes  # list of (key, name, bracket text or None)
        self.lineno = lineno


class ObjType:
    """A %handle or %range line: a kind of object a client holds."""

    def __init__(self, kind, name, opts, lineno):
        self.kind = kind      # "handle" or "range"
        self.name = name      # C type (handles) or range kind name
        self.opts = opts      # option -> value (True for flags)
        self.lineno = lineno
        self.id = None        # C enumerator

    def enum(self):
        return "SHIM_HT_%s" % self.name if self.kind == "handle" else "SHIM_HT_MEM_%s" % self.name.upper()


class StructDesc:
    def __init__(self, name, members, lineno, tag=None, cases=()):
        self.name = name
        self.members = members  # path -> kind ("null", "opaque", "checked", "span[N]", "array[n]")
        self.lineno = lineno
        self.tag = tag          # a tagged union's tag member (path), or None
        self.cases = list(cases)  # [(enumerator, {path: kind})]: the tag values carried


MEMBER_RE = re.compile(r"^([\w.]+):(null|opaque|checked|span\[\d+\]|array\[[\w.]+\])$")


def parse_struct(words, where):
    """A %struct line: member notes, and for a tagged union its tag=PATH and cases, each an
    enumerator of the tag's type alone or with the members live in it (CASE=path:kind,...;
    a bare path is a handle)."""
    members, tag, cases = {}, None, []
    for w in words[2:]:
        m = MEMBER_RE.match(w)
        if m:
            members[m.group(1)] = m.group(2)
        elif w.startswith("tag=") and re.match(r"^[\w.]+$", w[4:]):
            tag = w[4:]
        elif re.match(r"^[A-Z]\w*(=|$)", w):
            value, _, rest = w.partition("=")
            live = {}
            for part in filter(None, rest.split(",")):
                mm = MEMBER_RE.match(part) or re.match(r"^([\w.]+)()$", part)
                if not mm:
                    raise GenError("%s: %%struct %s: bad case member '%s'" % (where, words[1], part))
                live[mm.group(1)] = mm.group(2) or "handle"
            cases.append((value, live))
        else:
            raise GenError("%s: %%struct %s: bad member note '%s' (path:null, path:opaque, "
                           "path:checked, path:span[N], path:array[n], tag=path or a case)"
                           % (where, words[1], w))
    if cases and not tag:
        raise GenError("%s: %%struct %s: cases need tag=path" % (where, words[1]))
    return StructDesc(words[1], members, 0, tag, cases)


NOTE_RE = re.compile(r"^([a-z][a-z-]*):(\w+)(?:\[([^\]]+)\])?$")
TYPE_OPTS = {"destroy", "release", "parent", "outlives-parent", "before-parent", "counts",
             "context-free", "client", "bad", "unmapped", "drop", "forget"}
# Type options naming a family's hand-written operation srv_KIND_NAME (srv_type_KIND[]).
TYPE_HOOKS = ("release", "drop", "forget")


def parse_symbols(path):
    syms, types, structs, seen = [], [], [], set()
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            words = line.split()
            where = "%s:%d" % (path, lineno)
            if words[0] in ("%handle", "%range"):
                if len(words) < 2:
                    raise GenError("%s: %s needs a name" % (where, words[0]))
                opts = {}
                for w in words[2:]:
                    k, _, v = w.partition("=")
                    if k not in TYPE_OPTS:
                        raise GenError("%s: %s %s: unknown option '%s'" % (where, words[0], words[1], w))
                    opts[k] = v if v else True
                types.append(ObjType(words[0][1:], words[1], opts, lineno))
                continue
            if words[0] == "%struct":
                structs.append(parse_struct(words, where))
                structs[-1].lineno = lineno
                continue
            if words[0] in ("%op", "%payload"):
                continue  # the protocol's own operations and their payloads: gen/ops.py
            if words[0].startswith("%"):
                raise GenError("%s: unknown directive %s" % (where, words[0]))
            if len(words) < 2 or words[1] not in CLASSES:
                raise GenError("%s: expected 'name class [notes]', got '%s'" % (where, line))
            name, cls = words[0], words[1]
            if name in seen:
                raise GenError("%s: %s listed twice" % (where, name))
            seen.add(name)
            notes = []
            for w in words[2:]:
                m = NOTE_RE.match(w)
                if not m:
                    raise GenError("%s: %s: bad note '%s'" % (where, name, w))
                notes.append(m.groups())
            if cls == "twin":
                if len(notes) != 1 or notes[0][0] != "of":
                    raise GenError("%s: %s: a twin names its target, `twin of:NAME`" % (where, name))
            elif cls in ("local", "manual"):
                if any(n[0] != "impl" or n[2] for n in notes) or len(notes) > 1:
                    raise GenError("%s: %s: a %s row's one note is impl:FILE (interpose/FILE.c)"
                                   % (where, name, cls))
            elif notes and cls not in ("sync", "async", "copy"):
                raise GenError("%s: %s: notes are only for sync/async/copy symbols" % (where, name))
            syms.append(Symbol(name, cls, notes, lineno))
    return syms, types, structs


def parse_procaddr(path):
    rows = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 4:
                raise GenError("%s:%d: expected 4 tab-separated fields" % (path, lineno))
            name, flags, version, answer = parts
            rows.append((name, int(flags), int(version), answer))
    return rows
