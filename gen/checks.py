"""Check steps: every row of cuda_symbols.txt against its prototype in cuda.h. The Model
(everything the parse steps found), the descriptor of each call (Described, built by
describe() from the parameter kinds of gen/algebra.py), twins, via: and parents resolved
between calls, and the %handle/%range lines checked. Every failure names its line."""

import algebra
import copies
from algebra import DPTR_TYPES
from common import GenError


PTDS_SUFFIXES = ("_ptds", "_ptsz")
MAX_PARENTS = 8  # struct shim_type's parents[] (channel/desc.h)


class Model:
    """Everything the parse steps found, for the check steps."""

    def __init__(self, protos, ptr_handles, ctypes, types, structs, syms):
        self.protos = protos
        self.ctypes = ctypes
        self.types = types
        self.handle_types = {t.name: t for t in types if t.kind == "handle"}
        self.range_types = {t.name: t for t in types if t.kind == "range"}
        # Every handle type a parameter may have: cuda.h's pointer handles, and integer
        # handle types declared with %handle.
        self.handles = list(ptr_handles) + [t.name for t in types if t.kind == "handle"
                                            and t.name not in ptr_handles]
        self.ptr_handles = set(ptr_handles)
        self.structs = {s.name: s for s in structs}
        self.syms = {s.name: s for s in syms}
        self.size_fns = []      # names of channel/sizes.c functions used by counts
        self.used_structs = {}  # struct name -> its member table rows (C initialisers)
        self.struct_tags = {}   # struct name -> its tag member, for tagged unions
        self.checked_structs = set()  # structs with members only hooks check


class Described:
    """A symbol with its prototype and the descriptor of each parameter."""

    def __init__(self, sym, proto):
        self.sym = sym
        self.proto = proto
        self.params = []  # C initialiser text per parameter
        self.kinds = []   # its kind in gen/algebra.py, per parameter
        self.destroys = -1
        self.stream = -1
        self.parent = -1
        self.host_sync = -1
        self.ctx_free = -1  # ctx-free:p: what the call makes at p belongs to no context
        self.loads_code = -1  # loads-code:p: may load p's code in a context (codegate.c)
        self.via = None
        self.flags = []
        self.twin = None  # the Described a twin stands for
        self.server_hook = None
        self.client_hook = None
        self.spans = []   # C initialisers of this call's span/size expressions
        self.needed = set()  # outputs the server needs even when the caller passes NULL
        self.copy = None  # a copy row: the copy engine's call (gen/copies.py)

    def flag_text(self):
        return " | ".join(self.flags) if self.flags else "0"


def describe(sym, proto, model, fail):
    """The descriptor of a call: each parameter's kind (gen/algebra.py) asked for its
    checks, its descriptor and what the replay learns from it, in prototype order."""
    d = Described(sym, proto)
    # Struct members marked `checked` are the server hook's to check.
    sym.checked_ok = any(n[0] == "server" for n in sym.notes)
    if sym.name.endswith(PTDS_SUFFIXES):
        d.flags.append("SHIM_CF_PTDS")
    if sym.cls == "copy":
        copies.describe(d, fail)
    if sym.cls not in ("sync", "async"):
        return d
    call = algebra.Call(d, model, fail)
    notes = read_notes(call)
    for i, p in enumerate(proto.params):
        kind = algebra.classify(call, i, p, *notes.get(p.name, (None, None)))
        kind.check()
        d.params.append(kind.pack())
        d.kinds.append(type(kind).__name__)
        kind.replay()
    check_roles(call)
    return d


def read_notes(call):
    """Notes that name a call or a hook, or say which parameter plays a role, set them on
    the Described -> the rest: parameter name -> (key, bracket text)."""
    d, sym, proto = call.d, call.sym, call.proto
    notes = {}
    named = {"via": "via", "server": "server_hook", "client": "client_hook"}
    roles = {"on": "stream", "parent": "parent", "sync-if-host": "host_sync",
             "ctx-free": "ctx_free", "loads-code": "loads_code"}
    for key, pname, count in sym.notes:
        if key in named:
            setattr(d, named[key], pname)
            continue
        if key == "of":
            call.fail("of: is for twins")
        if pname not in call.index:
            call.fail("note '%s:%s' names no parameter" % (key, pname))
        if key in roles:
            if key == "on" and call.param(pname).ctype != "CUstream":
                call.fail("on:%s is not a CUstream parameter" % pname)
            setattr(d, roles[key], call.index[pname])
            continue
        if pname in notes:
            call.fail("parameter %s annotated twice" % pname)
        notes[pname] = (key, count)
    return notes


def check_roles(call):
    """The call's roles against what its parameters are; the flags they give it."""
    d, sym, proto, model = call.d, call.sym, call.proto, call.model
    if sym.cls == "async" and d.stream < 0 and d.via is None:
        call.fail("async call without a CUstream parameter (or via:)")
    if d.host_sync >= 0 and proto.params[d.host_sync].ctype not in DPTR_TYPES:
        call.fail("sync-if-host: names no device address")
    if d.loads_code >= 0:
        if proto.params[d.loads_code].ctype not in ("CUkernel", "CUfunction", "CUlibrary"):
            call.fail("loads-code: names no kernel, function or library")
        d.flags.append("SHIM_CF_LOADS_CODE")
    params = {p.name: p for p in proto.params}
    creates = [n for n in sym.notes if n[0] == "new" or n[0] in model.range_types or
               (n[0] == "out" and params[n[1]].pointee() in model.handles)]
    if d.parent >= 0 and not creates:
        call.fail("parent: on a call that returns no handle or range")
    # Objects bound to a context need one current when they are made (the driver's rule);
    # handles a call only returns (out:) already exist. ctx-free:p says the object made at p
    # belongs to no context whatever its type (a library's managed memory, shared by every
    # device): none need be current, and it goes with its parent or its client.
    if d.ctx_free >= 0:
        if not any(n[1] == proto.params[d.ctx_free].name and n[0] in model.range_types
                   for n in creates):
            call.fail("ctx-free: names no range the call makes")
        d.flags.append("SHIM_CF_CONTEXT_FREE")
    for key, pname, _ in creates:
        if key == "out" or (d.ctx_free >= 0 and pname == proto.params[d.ctx_free].name):
            continue
        t = model.range_types.get(key) or model.handle_types.get(params[pname].pointee())
        if t and not t.opts.get("context-free") and "SHIM_CF_CONTEXT" not in d.flags:
            d.flags.append("SHIM_CF_CONTEXT")


def resolve_twin(d, by_name, fail):
    """A twin is another exported name for a call the shim implements once: an older
    version with the same prototype, or the per-thread default stream variant."""
    target = d.sym.notes[0][1]
    t = by_name.get(target)
    if t is None:
        fail(d.sym, "twin of %s, which is not listed" % target)
    if t.sym.cls not in ("local", "manual", "copy", "sync", "async"):
        fail(d.sym, "twin of %s, whose class is %s" % (target, t.sym.cls))
    if d.proto.types() != t.proto.types():
        fail(d.sym, "twin of %s, whose prototype differs" % target)
    d.twin = t
    d.flags = []
    if d.sym.name.endswith(PTDS_SUFFIXES) and not target.endswith(PTDS_SUFFIXES):
        d.flags.append("SHIM_CF_PTDS")


def resolve_via(d, by_name, fail):
    """via:CALL replays the call as CALL with the caller's default stream appended (a sync
    memset becomes the async one on the client's own NULL stream)."""
    t = by_name.get(d.via)
    if t is None or t.sym.cls not in ("sync", "async"):
        fail(d.sym, "via:%s must name a sync or async call" % d.via)
    if t.proto.types() != d.proto.types() + ["CUstream"]:
        fail(d.sym, "via:%s must take this call's parameters and a CUstream last" % d.via)
    if d.sym.cls != "async":
        fail(d.sym, "via: is for async calls (enqueued on the caller's default stream)")
    d.via_desc = t


def resolve_parent(d, model, fail):
    """Which parameter is the parent of what the call creates: `parent:p`, else the one
    parameter whose type is a declared parent type of what is created."""
    if d.sym.cls not in ("sync", "async") or d.parent >= 0:
        return
    params = {p.name: p for p in d.proto.params}
    created = []
    for key, pname, _ in d.sym.notes:
        if key in model.range_types:
            created.append(model.range_types[key])
        elif key in ("new", "out") and params[pname].is_pointer():
            t = model.handle_types.get(params[pname].pointee())
            if t:
                created.append(t)
    parents = set()
    for t in created:
        if isinstance(t.opts.get("parent"), str):
            parents.update(t.opts["parent"].split(","))
    cands = [i for i, p in enumerate(d.proto.params) if p.ctype in parents]
    if len(cands) > 1:
        fail(d.sym, "several parameters could be the parent (%s): say which with parent:"
             % ", ".join(d.proto.params[i].name for i in cands))
    if cands:
        d.parent = cands[0]


def check_types(model, by_name, errors):
    """%handle and %range lines: known types, destroyers taking exactly one object of the
    type, declared parent types."""
    names = set(model.handles) | set(model.range_types)
    for t in model.types:
        where = "cuda_symbols.txt:%d: %%%s %s" % (t.lineno, t.kind, t.name)
        if t.kind == "handle" and t.name not in model.ptr_handles and \
                (t.name not in model.ctypes.typedefs or model.ctypes.resolve(t.name)[0] != "name"):
            errors.append("%s: not a handle or integer type of cuda.h" % where)
        dest = t.opts.get("destroy")
        if dest:
            dd = by_name.get(dest)
            want = DPTR_TYPES if t.kind == "range" else (t.name,)
            if dd is None or dd.proto is None:
                errors.append("%s: destroy=%s is not a call of cuda.h" % (where, dest))
            elif len(dd.proto.params) != 1 or dd.proto.params[0].ctype not in want:
                errors.append("%s: destroy=%s must take exactly one %s" % (where, dest, want[0]))
        if dest and t.opts.get("release"):
            errors.append("%s: destroy= or release=, not both" % where)
        if t.kind != "range" and (t.opts.get("unmapped") or t.opts.get("counts")):
            errors.append("%s: unmapped and counts are for %%range kinds" % where)
        if t.opts.get("outlives-parent") and t.opts.get("before-parent"):
            errors.append("%s: outlives-parent or before-parent, not both" % where)
        bad = t.opts.get("bad")
        if bad is not None and (bad is True or "CUDA_ERROR_" + bad not in model.error_names):
            errors.append("%s: bad=NAME names a CUDA_ERROR_NAME of cuda.h" % where)
        parent = t.opts.get("parent")
        if parent is True:
            errors.append("%s: parent= names the parent types" % where)
        elif parent:
            if len(parent.split(",")) > MAX_PARENTS:
                errors.append("%s: at most %d parent types" % (where, MAX_PARENTS))
            for p in parent.split(","):
                if p not in names:
                    errors.append("%s: parent=%s is not a declared type" % (where, p))


def check(syms, types, structs, protos, ptr_handles, ctypes, error_names):
    errors = []
    model = Model(protos, ptr_handles, ctypes, types, structs, syms)
    model.error_names = error_names

    def fail(sym, msg):
        errors.append("cuda_symbols.txt:%d: %s: %s" % (sym.lineno, sym.name, msg))
        raise GenError()

    described = []
    for s in syms:
        proto = protos.get(s.name)
        if proto is None and s.cls not in ("unsupported", "absent"):
            errors.append("cuda_symbols.txt:%d: %s: class %s needs a prototype in cuda.h"
                          % (s.lineno, s.name, s.cls))
            continue
        try:
            described.append(describe(s, proto, model, fail) if proto else Described(s, None))
        except GenError:
            pass
    by_name = {d.sym.name: d for d in described}
    for d in described:
        try:
            if d.sym.cls == "twin":
                resolve_twin(d, by_name, fail)
            if d.via is not None:
                resolve_via(d, by_name, fail)
            resolve_parent(d, model, fail)
        except GenError:
            pass
    check_types(model, by_name, errors)
    for s in model.structs.values():
        if not getattr(s, "used", False):
            errors.append("cuda_symbols.txt:%d: %%struct %s: no call passes it" % (s.lineno, s.name))
    if errors:
        raise GenError("\n".join(errors))
    return described, model
