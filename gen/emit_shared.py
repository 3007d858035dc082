"""Write steps of the outputs both ends compile: shim_ids.h (call ids, object types, size
functions, the symbol-file hash) and shim_desc.c (the descriptor of every call, struct
member tables, object types, error names); and the hook names both ends declare."""

import os

from common import HEADER, write
from symbol_file import CLASSES


def hooks_of(described, which):
    names = []
    for d in described:
        h = d.server_hook if which == "server" else d.client_hook
        if h and h not in names:
            names.append(h)
    return names


def write_ids(out, described, model, symbols_hash):
    lines = ["/* %s */" % HEADER, "#ifndef SHIM_IDS_H", "#define SHIM_IDS_H", "",
             "#include <stdint.h>", "",
             "/* Call ids: the order of cuda_symbols.txt, so ids are stable while it only grows. */",
             "enum shim_id {"]
    for i, d in enumerate(described):
        lines.append("    SHIM_ID_%s = %d," % (d.sym.name, i))
    lines += ["};", "#define SHIM_NCALLS %d" % len(described), "",
              "/* Object types: cuda.h's handle types (`typedef struct X *T`), integer handle",
              " * types declared with %handle, and the kinds of memory range (%range). */",
              "enum shim_htype {", "    SHIM_HT_NONE = 0,"]
    n = 1
    for h in model.handles:
        lines.append("    SHIM_HT_%s = %d," % (h, n))
        n += 1
    for t in model.types:
        if t.kind == "range":
            lines.append("    %s = %d," % (t.enum(), n))
            n += 1
    lines += ["};", "#define SHIM_NHTYPES %d" % n, "",
              "/* Size functions of counts written [@name(param)] (channel/sizes.c defines them):",
              " * the byte count of a pointer parameter from the value of parameter param. */",
              "enum shim_size_fn {"]
    for i, fn in enumerate(model.size_fns):
        lines.append("    SHIM_SZ_%s = %d," % (fn, i))
    lines += ["    SHIM_NSIZE_FNS = %d," % len(model.size_fns), "};"]
    for fn in model.size_fns:
        lines.append("uint64_t shim_size_%s(uint64_t value);" % fn)
    lines += ["", "/* Hash of cuda_symbols.txt: client and server must agree on every call id. */",
              "#define SHIM_SYMBOLS_HASH 0x%sull" % symbols_hash, "", "#endif", ""]
    write(os.path.join(out, "shim_ids.h"), "\n".join(lines))


def write_desc(out, described, model, errors):
    cls_c = {c: "SHIM_" + c.upper() for c in CLASSES}
    lines = ["/* %s */" % HEADER, "#include <stddef.h>", '#include "channel/desc.h"', ""]
    for name, members in model.used_structs.items():
        if not members:
            continue
        lines.append("static const struct shim_member M_%s[] = {" % name)
        lines += ["    %s," % row for row in members]
        tag = model.struct_tags.get(name)
        st = "SHIM_UNION(%s, %s, M_%s)" % (name, tag, name) if tag else "SHIM_STRUCT(%s, M_%s)" % (name, name)
        lines += ["};", "static const struct shim_struct S_%s = %s;" % (name, st)]
    for d in described:
        if d.spans:
            lines.append("static const struct shim_span SPAN_%s[] = {%s};" % (d.sym.name, ", ".join(d.spans)))
        if d.params:
            lines.append("static const struct shim_param P_%s[] = {" % d.sym.name)
            lines += ["    %s," % p for p in d.params]
            lines.append("};")
    lines += ["", "const struct shim_call shim_calls[SHIM_NCALLS] = {"]
    for d in described:
        c = cls_c[d.sym.cls]
        if d.twin is not None:
            lines.append("    SHIM_CALL_TWIN(%s, %s, %s)," % (d.sym.name, d.twin.sym.name, d.flag_text()))
        elif d.params:
            via = "SHIM_ID_%s" % d.via if d.via else "0"
            needed = sum(1 << i for i in d.needed)
            lines.append("    SHIM_CALL(%s, %s, P_%s, %s, %d, %d, %d, %d, %s, 0x%xu),"
                         % (d.sym.name, c, d.sym.name, d.flag_text(), d.destroys, d.stream,
                            d.parent, d.host_sync, via, needed))
        else:
            lines.append("    SHIM_CALL_NOPARAMS(%s, %s, %s)," % (d.sym.name, c, d.flag_text()))
    lines += ["};", "", "const struct shim_type shim_types[SHIM_NHTYPES] = {",
              '    [SHIM_HT_NONE] = {.name = "none", .destroyer = -1},']
    declared = {t.name: t for t in model.types if t.kind == "handle"}
    for h in model.handles:
        t = declared.get(h)
        if t is None:
            lines.append('    [SHIM_HT_%s] = {.name = "%s", .destroyer = -1},' % (h, h))
        else:
            lines.append("    [%s] = %s," % (t.enum(), type_init(t, '"%s"' % h)))
    for t in model.types:
        if t.kind == "range":
            lines.append("    [%s] = %s," % (t.enum(), type_init(t, '"%s memory"' % t.name)))
    lines += ["};", "", "const struct shim_errname shim_errnames[] = {"]
    lines += ['    {%d, "%s"},' % (v, n) for n, v in sorted(errors, key=lambda e: e[1])]
    lines += ["};", "const size_t shim_nerrnames = sizeof(shim_errnames) / sizeof(shim_errnames[0]);", ""]
    lines += ["uint64_t (*const shim_size_fns[SHIM_NSIZE_FNS + 1])(uint64_t value) = {"]
    lines += ["    [SHIM_SZ_%s] = shim_size_%s," % (fn, fn) for fn in model.size_fns]
    lines += ["};", ""]
    write(os.path.join(out, "shim_desc.c"), "\n".join(lines))


def type_init(t, name):
    flags = []
    if t.kind == "range":
        flags.append("SHIM_TF_RANGE")
    for opt, flag in (("counts", "SHIM_TF_COUNTS"), ("context-free", "SHIM_TF_CONTEXT_FREE"),
                      ("client", "SHIM_TF_CLIENT"), ("outlives-parent", "SHIM_TF_OUTLIVES_PARENT"),
                      ("release", "SHIM_TF_RELEASE"), ("unmapped", "SHIM_TF_UNMAPPED"),
                      ("before-parent", "SHIM_TF_BEFORE_PARENT")):
        if t.opts.get(opt):
            flags.append(flag)
    parents = t.opts["parent"].split(",") if isinstance(t.opts.get("parent"), str) else []
    # Parents are handle types (CUmodule) or range kinds (device): C type names start upper.
    penum = ["SHIM_HT_%s" % p if p[0].isupper() else "SHIM_HT_MEM_%s" % p.upper() for p in parents]
    dest = "SHIM_ID_%s" % t.opts["destroy"] if t.opts.get("destroy") else "-1"
    bad = "CUDA_ERROR_%s" % t.opts["bad"] if isinstance(t.opts.get("bad"), str) else "CUDA_ERROR_INVALID_HANDLE"
    return ("{.name = %s, .destroyer = %s, .flags = %s, .bad = %s, .nparents = %d, .parents = {%s}}"
            % (name, dest, " | ".join(flags) if flags else "0", bad, len(penum), ", ".join(penum) or "0"))
