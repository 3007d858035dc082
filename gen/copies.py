"""The copy rows of cuda_symbols.txt (class copy): each names the sides of a copy, its extent
and its stream, and its entry point is one call of the copy engine (interpose/memcpy.h),
which gen/emit_client.py writes as SHIM_COPY_ENTRY. The engine itself is hand-written (it
stages pageable memory through the slots); a row only says which parameter is what.

    src:p[KIND] dst:p[KIND]   a side: KIND host (a host pointer), device, unified (either:
                              the address says), array+OFFSET (an array and the byte offset
                              parameter), peer+CONTEXT (a device address in that context's
                              device; both sides or neither)
    bytes:n                   the byte count of a linear copy
    struct:p[unaligned]       instead of sides and bytes: a CUDA_MEMCPY2D, CUDA_MEMCPY3D or
                              CUDA_MEMCPY3D_PEER describes the copy ([unaligned]: a 2D one
                              that the driver may do with unaligned accesses)
    on:s                      the stream: the copy is asynchronous (returns once queued);
                              without it, synchronous, on the caller's default stream
"""

import re

SIDE_KINDS = {"host": "shim_copy_host", "device": "shim_copy_device",
              "unified": "shim_copy_unified", "array": "shim_copy_array", "peer": "shim_copy_peer"}
# The second parameter a side kind takes, and its type.
SIDE_EXTRA = {"array": "size_t", "peer": "CUcontext"}
SIDE_TYPES = {"host": None, "device": "CUdeviceptr", "unified": "CUdeviceptr",
              "array": "CUarray", "peer": "CUdeviceptr"}
STRUCTS = {"CUDA_MEMCPY2D": "shim_copy_2d", "CUDA_MEMCPY3D": "shim_copy_3d",
           "CUDA_MEMCPY3D_PEER": "shim_copy_3d_peer"}


def describe(d, fail):
    """Checks a copy row's notes against its prototype; sets d.copy, the engine call its
    entry point makes (C text), and d.stream."""
    sym, proto = d.sym, d.proto
    params = {p.name: (i, p) for i, p in enumerate(proto.params)}
    used = set()

    def param(name, ctype, what):
        if name not in params:
            fail(sym, "%s names no parameter (%s)" % (what, name))
        if name in used:
            fail(sym, "parameter %s named twice" % name)
        p = params[name][1]
        ok = p.is_pointer() and p.pointee() in ("void", "const void") if ctype is None else \
            p.ctype == ctype
        if not ok:
            fail(sym, "%s: %s is %s, not %s" % (what, name, p.ctype, ctype or "a host pointer"))
        used.add(name)
        return name

    sides, bytes_, struct, stream, unaligned = {}, None, None, "NULL", False
    for key, pname, extra in sym.notes:
        if key in ("src", "dst"):
            kind, _, more = (extra or "").partition("+")
            if kind not in SIDE_KINDS or bool(more) != (kind in SIDE_EXTRA) or key in sides:
                fail(sym, "%s:%s[%s]: a side is src:p[host|device|unified|array+OFFSET|"
                     "peer+CONTEXT], once each" % (key, pname, extra))
            args = [param(pname, SIDE_TYPES[kind], key)]
            if more:
                args.append(param(more, SIDE_EXTRA[kind], key))
            sides[key] = (kind, "%s(%s)" % (SIDE_KINDS[kind], ", ".join(args)))
        elif key == "bytes" and extra is None:
            bytes_ = param(pname, "size_t", "bytes")
        elif key == "struct" and extra in (None, "unaligned"):
            p = params.get(pname, (0, None))[1]
            elem = p.pointee() if p is not None and p.is_pointer() else ""
            elem = re.sub(r"^const ", "", elem)
            if elem not in STRUCTS or p.ctype != "const %s *" % elem:
                fail(sym, "struct:%s is no const %s *" % (pname, " *, const ".join(STRUCTS)))
            if extra and elem != "CUDA_MEMCPY2D":
                fail(sym, "struct:%s[unaligned] is for a CUDA_MEMCPY2D" % pname)
            struct, unaligned = (STRUCTS[elem], param(pname, p.ctype, "struct")), bool(extra)
        elif key == "on" and extra is None:
            stream = param(pname, "CUstream", "on")
            d.stream = params[pname][0]
        else:
            fail(sym, "bad note %s:%s for a copy (src:, dst:, bytes:, struct:, on:)" % (key, pname))
    if len(used) != len(params):
        fail(sym, "parameters the row does not name: %s"
             % ", ".join(p.name for p in proto.params if p.name not in used))
    flags = " | ".join(f for f, on in (("CHAN_CF_ASYNC", stream != "NULL"),
                                       ("CHAN_CF_UNALIGNED", unaligned)) if on) or "0"
    if struct:
        if sides or bytes_:
            fail(sym, "struct: describes the whole copy: no src:, dst: or bytes: beside it")
        d.copy = "%s(%s, %s, %s)" % (struct[0], struct[1], stream, flags)
        return
    if len(sides) != 2 or bytes_ is None:
        fail(sym, "a copy names src:, dst: and bytes: (or struct:)")
    if (sides["src"][0] == "peer") != (sides["dst"][0] == "peer"):
        fail(sym, "a peer copy has two peer sides")
    d.copy = "shim_copy(%s, %s, %s, %s, %s)" % (sides["src"][1], sides["dst"][1], bytes_, stream,
                                                 flags)
