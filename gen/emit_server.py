"""Write step of the server (server/): srv_hooks.c, its hook tables per call and per object
type, and srv_hooks.h, their declarations."""

import os

from common import HEADER, write
from emit_shared import hooks_of
from symbol_file import TYPE_HOOKS


def type_hooks(model, kind="release"):
    names = []
    for t in model.types:
        if t.opts.get(kind) and t.opts[kind] not in names:
            names.append(t.opts[kind])
    return names


def write_srv_hooks(out, described, model):
    """The server's hooks: per generic call (srv_hook_NAME, defined in the family's file of
    server/) and per object type with a hand-written release (srv_release_NAME)."""
    lines = ["/* %s */" % HEADER, '#include "server/core/server.h"', "",
             "const struct srv_hook *const srv_call_hooks[SHIM_NCALLS] = {"]
    for d in described:
        if d.server_hook:
            lines.append("    [SHIM_ID_%s] = &srv_hook_%s," % (d.sym.name, d.server_hook))
    lines += ["};", ""]
    for kind in TYPE_HOOKS:
        lines += ["srv_release_fn *const srv_type_%s[SHIM_NHTYPES] = {" % kind]
        lines += ["    [%s] = srv_%s_%s," % (t.enum(), kind, t.opts[kind])
                  for t in model.types if t.opts.get(kind)]
        lines += ["};", ""]
    write(os.path.join(out, "srv_hooks.c"), "\n".join(lines))
    hdr = ["/* %s */" % HEADER, "#ifndef SRV_HOOKS_H", "#define SRV_HOOKS_H", ""]
    hdr += ["extern const struct srv_hook srv_hook_%s;" % h for h in hooks_of(described, "server")]
    hdr += ["srv_release_fn srv_%s_%s;" % (k, h) for k in TYPE_HOOKS for h in type_hooks(model, k)]
    hdr += ["", "#endif", ""]
    write(os.path.join(out, "srv_hooks.h"), "\n".join(hdr))
