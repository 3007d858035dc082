"""Parse step of cuda.h: the toolkit's header preprocessed by the C compiler, and from it
every call's prototype (Proto, Param), the handle types (`typedef struct X *T`) and the
error names. The types themselves are gen/ctypes_parse.py's."""

import re
import subprocess

from common import GenError


class Param:
    def __init__(self, ctype, name):
        self.ctype = ctype  # type text as written, e.g. "const CUgraphNode *"
        self.name = name

    def is_pointer(self):
        return self.ctype.endswith("*")

    def pointee(self):
        """Element type of a pointer parameter, without the outer const."""
        t = self.ctype[:-1].strip()
        t = re.sub(r"^const\s+", "", t)
        t = re.sub(r"\s+const$", "", t)
        return t


class Proto:
    def __init__(self, name, params):
        self.name = name
        self.params = params

    def decl(self):
        if not self.params:
            return "(void)"
        return "(" + ", ".join("%s %s" % (p.ctype, p.name) for p in self.params) + ")"

    def types(self):
        return [p.ctype for p in self.params]


def preprocess(cc, include):
    src = "#include <cuda.h>\n#include <cudaProfiler.h>\n"
    # __CUDA_API_VERSION_INTERNAL declares every versioned and per-thread variant under its
    # own name, the way the driver exports them.
    cmd = [cc, "-E", "-P", "-D__CUDA_API_VERSION_INTERNAL", "-I", include, "-x", "c", "-"]
    try:
        out = subprocess.run(cmd, input=src, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise GenError("preprocessing cuda.h with %s failed: %s" % (" ".join(cmd), e))
    return re.sub(r"\s+", " ", out.stdout)


def parse_protos(text):
    protos = {}
    for name, args in re.findall(r"\bCUresult (cu\w+) ?\(([^()]*)\) ?;", text):
        params = []
        args = args.strip()
        if args and args != "void":
            for a in args.split(","):
                a = re.sub(r"\s*\*\s*", " * ", a.strip())
                m = re.match(r"^(.*?)\s*(\w+)$", a)
                if not m or not m.group(1):
                    raise GenError("%s: cannot parse parameter '%s'" % (name, a))
                ctype = re.sub(r"\s+", " ", m.group(1)).replace(" * *", " **").strip()
                ctype = re.sub(r" \*$", " *", ctype)
                params.append(Param(ctype, m.group(2)))
        protos[name] = Proto(name, params)
    if len(protos) < 500:
        raise GenError("found only %d prototypes in cuda.h: wrong header?" % len(protos))
    return protos


def parse_handle_types(text):
    return [n for _, n in re.findall(r"typedef struct (\w+) ?\* ?(\w+) ?;", text)]


def parse_errors(text):
    m = re.search(r"enum cudaError_enum ?\{(.*?)\}", text)
    if not m:
        raise GenError("cuda.h has no enum cudaError_enum")
    return [(n, int(v)) for n, v in re.findall(r"(CUDA_\w+) ?= ?(\d+)", m.group(1))]
