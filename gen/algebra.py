"""The type algebra of gen/gen.py: what one parameter of a call is, and what each end does
with it.

In the spirit of apitrace's specs/stdapi.py: a parameter's prototype (cuda.h) and its note
(cuda_symbols.txt) make one kind of value, a Kind: a scalar, a device, a handle, a context, a
device address with its span, a string, an array of T with a length (of structs whose
members are described), a memory range the call makes, the driver's own array returned by
reference. classify() picks the kind; each kind then answers three questions, its visitors:

  check()   what the description must say for it (refusals name the parameter)
  pack()    its descriptor, the C initialiser both ends' marshallers read (channel/desc.h):
            how the client packs it and the server unpacks, checks and maps it
  replay()  what the server's replay learns from it about the call: its stream, what it
            destroys, which outputs it needs even when the caller passes NULL for them

describe() in gen/checks.py asks every parameter in prototype order (pack() adds the spans and
size functions the descriptor names, whose order the generated tables keep).
"""

import re

DPTR_TYPES = ("CUdeviceptr", "CUdeviceptr_v2")
# A client's devices are its own ordinals (server/core/devices.c maps them): these types, and the
# id of this struct where its type is a device, are mapped wherever they travel.
DEVICE_TYPES = ("CUdevice", "CUdevice_v1")
LOCATION_TYPE = "CUmemLocation"


class Call:
    """One call being described: its symbol, prototype and the Described it fills."""

    def __init__(self, d, model, fail):
        self.d = d
        self.sym = d.sym
        self.proto = d.proto
        self.model = model
        self._fail = fail
        self.index = {p.name: i for i, p in enumerate(d.proto.params)}

    def fail(self, msg):
        self._fail(self.sym, msg)

    def param(self, name):
        return self.proto.params[self.index[name]]

    def size(self, text, allow_fn=True):
        """A count or size expression: `n`, `*n`, `8`, `a*b`, `N*4`, `@fn` -> (C initialiser
        of struct shim_size, (the parameters it reads, its constant factor))."""
        if text.startswith("@"):
            return self._size_fn(text, allow_fn), None
        args, k = [], 1
        # A leading '*' is a dereference, not a product: "*n" splits as ["", "n"].
        terms, i = text.split("*"), 0
        while i < len(terms):
            t, deref = terms[i], terms[i] == ""
            if deref:
                i += 1
                t = terms[i] if i < len(terms) else ""
            if t.isdigit():
                if deref:
                    self.fail("cannot dereference a number in [%s]" % text)
                k *= int(t)
            else:
                if t not in self.index:
                    self.fail("[%s] names no parameter '%s'" % (text, t))
                if deref != self.param(t).is_pointer():
                    self.fail("[%s]: '%s' must%s be dereferenced"
                              % (text, t, "" if self.param(t).is_pointer() else " not"))
                args.append(("arg", self.index[t], deref))
            i += 1
        if len(args) > 2:
            self.fail("[%s]: at most two parameters in a size" % text)
        a, b = (args + [("arg", -1, False)] * 2)[:2]
        return "SHIM_SIZE(%d, %d, %d, %d, %d)" % (a[1], int(a[2]), b[1], int(b[2]), k), (args, k)

    def _size_fn(self, text, allow_fn):
        m = re.match(r"^@(\w+)\((\w+)\)$", text)
        if not allow_fn or not m:
            self.fail("size function %s: @name(parameter), for pointer counts only" % text)
        fn, arg = m.groups()
        if arg not in self.index or self.param(arg).is_pointer():
            self.fail("size function %s: %s is not a value parameter" % (text, arg))
        if fn not in self.model.size_fns:
            self.model.size_fns.append(fn)
        return "SHIM_SZ_%s, %d" % (fn, self.index[arg])

    def count(self, count):
        """An element count -> C initialiser of struct shim_count."""
        if count is None:
            return "SHIM_N_ONE"
        if count.isdigit():
            return "SHIM_N_FIXED(%s)" % count
        if count.startswith("@"):
            return "SHIM_N_FN(%s)" % self.size(count)[0]
        deref = count.startswith("*")
        cname = count.lstrip("*")
        if cname not in self.index:
            self.fail("count '%s' names no parameter" % count)
        if deref != self.param(cname).is_pointer():
            self.fail("count '%s' must%s be a dereferenced pointer" % (count, "" if deref else " not"))
        return "SHIM_N_%s(%d)" % ("DEREF" if deref else "ARG", self.index[cname])

    def add_span(self, init):
        """Adds a span to the call's table -> the C address of it."""
        self.d.spans.append(init)
        return "&SPAN_%s[%d]" % (self.sym.name, len(self.d.spans) - 1)

    def span(self, text):
        """span:p[bytes] or span:p[pitch,width,height] -> the C address of its span."""
        parts = text.split(",")
        if len(parts) == 1:
            size, (_, k) = self.size(parts[0], False)
            return self.add_span("SHIM_SPAN1(%s, %d)" % (size, k))
        if len(parts) != 3:
            self.fail("span [%s]: [bytes] or [pitch,width,height]" % text)
        pitch = self.size(parts[0], False)[0]
        width, (_, k) = self.size(parts[1], False)
        height = self.size(parts[2], False)[0]
        return self.add_span("SHIM_SPAN2(%s, %s, %s, %d)" % (pitch, width, height, k))

    def handle_type(self, t, what):
        """The %handle line of handle type t, refused when it has none."""
        if t not in self.model.handle_types:
            self.fail("%s, which has no %%handle line" % what)
        return self.model.handle_types[t]


class Kind:
    """One parameter: position i, prototype p, its note (key, count) and parameter flags."""

    def __init__(self, call, i, p, key, count, pflags=()):
        self.call, self.i, self.p, self.key, self.count = call, i, p, key, count
        self.t = p.ctype
        self.pflags = list(pflags)

    def fail(self, msg):
        self.call.fail(msg)

    def check(self):
        pass

    def pack(self):
        raise NotImplementedError

    def replay(self):
        pass


class Context(Kind):
    """A context the call acts in: the client sends its id, the server the device's real
    context (NULL: the current one)."""

    def check(self):
        if self.key is not None:
            self.fail("note %s:%s on a context" % (self.key, self.p.name))

    def pack(self):
        return "SHIM_P_CTX()"


class Destroyed(Kind):
    """destroys:h: a handle or range base the call destroys on success."""

    def check(self):
        if self.t not in DPTR_TYPES and self.t not in self.call.model.handle_types:
            self.fail("destroys:%s must name a handle (with a %%handle line) or a device address"
                      % self.p.name)

    def pack(self):
        if self.t in DPTR_TYPES:
            return "SHIM_P_DPTR(%s, NULL)" % self.t
        return "SHIM_P_HANDLE(%s, %s)" % (self.t, self.call.model.handle_types[self.t].enum())

    def replay(self):
        self.call.d.destroys = self.i


class Raw(Kind):
    """raw:h: a handle or address passed unchecked. A void * may be an address the driver
    only looks up (cuMemRetainAllocationHandle): it travels as its value, never read here."""

    def check(self):
        if self.p.is_pointer() and self.t.replace(" ", "") != "void*":
            self.fail("raw:%s is a pointer; raw is for handles and addresses" % self.p.name)

    def pack(self):
        return "SHIM_P_RAW(%s)" % self.t


class Span(Kind):
    """span:p[...]: a device address naming that much of the caller's memory."""

    def check(self):
        if self.t not in DPTR_TYPES:
            self.fail("span:%s is not a device address" % self.p.name)

    def pack(self):
        return "SHIM_P_DPTR(%s, %s)" % (self.t, self.call.span(self.count))


class MakesRange(Kind):
    """RANGE:p[size] on a device address: the call makes a range of that kind at p (cuMemMap)."""

    def check(self):
        if self.count is None:
            self.fail("%s:%s needs its size: %s:%s[bytes]" % (self.key, self.p.name, self.key, self.p.name))

    def pack(self):
        size = self.call.size(self.count, False)[0]
        span = self.call.add_span("SHIM_SPAN1(%s, 1)" % size)
        return "SHIM_P_MAKES(%s, %s, %s)" % (self.t, self.call.model.range_types[self.key].enum(), span)


class Scalar(Kind):
    """A value parameter: copied as it is; a device ordinal is mapped."""

    def check(self):
        if self.key is not None:
            self.fail("note %s:%s on a non-pointer parameter" % (self.key, self.p.name))
        if self.t in DPTR_TYPES:
            self.fail("device address %s needs a span (span:%s[bytes]) or raw:%s"
                      % (self.p.name, self.p.name, self.p.name))

    def pack(self):
        return "SHIM_P_%s(%s)" % ("DEVICE" if self.t in DEVICE_TYPES else "VAL", self.t)


class Handle(Scalar):
    """A handle by value: checked against the caller's objects and mapped. The first stream
    of an async call is the one it is enqueued on."""

    def check(self):
        Scalar.check(self)
        self.ht = self.call.handle_type(self.t, "parameter %s is a %s" % (self.p.name, self.t))

    def pack(self):
        return "SHIM_P_HANDLE(%s, %s)" % (self.t, self.ht.enum())

    def replay(self):
        d = self.call.d
        if self.t == "CUstream" and d.stream < 0 and d.sym.cls == "async":
            d.stream = self.i


class Str(Kind):
    """str:p: a NUL-terminated input string."""

    def check(self):
        if self.p.pointee() != "char":
            self.fail("str:%s is not a char pointer" % self.p.name)

    def pack(self):
        return "SHIM_P_STR()"


class OutStr(Kind):
    """outstr:p: a string the callee returns, which travels as text."""

    def check(self):
        if self.t != "const char **":
            self.fail("outstr:%s is not a const char **" % self.p.name)

    def pack(self):
        return "SHIM_P_OUTSTR()"

    def replay(self):
        self.call.d.needed.add(self.i)


class OutRef(Kind):
    """outref:p[*n]: const T **, the callee returns a pointer to an array of its own (count
    from an output); the elements travel, the client keeps them for the calling thread."""

    def check(self):
        m = re.match(r"^const (\w+) \*\*$", self.t)
        count = self.count
        if not m or count is None or not count.startswith("*"):
            self.fail("outref:%s must be a const T ** with a count output: outref:p[*n]" % self.p.name)
        self.elem, self.n = m.group(1), count[1:]
        if self.n not in self.call.index or not self.call.param(self.n).is_pointer():
            self.fail("outref:%s: its count %s must be an output" % (self.p.name, count))
        if self.elem in self.call.model.handles:
            self.call.handle_type(self.elem, "outref:%s returns %s handles" % (self.p.name, self.elem))

    def pack(self):
        ht = self.call.model.handle_types.get(self.elem)
        return "SHIM_P_OUTREF(%s, %s, %d)" % (self.elem, ht.enum() if ht else "SHIM_HT_NONE",
                                              self.call.index[self.n])

    def replay(self):
        self.call.d.needed.add(self.call.index[self.n])


class ReturnsRange(Kind):
    """RANGE:p[size] on a pointer: a device range the call returns, its base here, its size
    from the bracket."""

    def check(self):
        if self.p.pointee() not in DPTR_TYPES:
            self.fail("%s:%s does not return a device address" % (self.key, self.p.name))
        if self.count is None:
            self.fail("%s:%s needs its size: %s:%s[bytes]" % (self.key, self.p.name, self.key, self.p.name))

    def pack(self):
        size, (self.args, _) = self.call.size(self.count, False)
        span = self.call.add_span("SHIM_SPAN1(%s, 1)" % size)
        after = any(a[2] for a in self.args)  # the size is an output: known after the call
        return "SHIM_P_RANGE(%s, %s, %s, %d)" % (self.p.pointee(), self.call.model.range_types[self.key].enum(),
                                                 span, int(after))

    def replay(self):
        # The server needs any size it reads back even when the caller passes NULL for it
        # (cuModuleGetGlobal allows that); a NULL base is the driver's to refuse (and a range
        # nobody learnt the address of needs no record).
        self.call.d.needed.update(a[1] for a in self.args if a[2])


class Array(Kind):
    """in:/out:/inout:/new:p[n]: a pointer to n elements of T (one without a count): plain
    values, handles (new: ones the caller now owns), device ordinals, or structs whose
    pointer, handle and device address members are described (struct_members)."""

    KINDS = {"in": "SHIM_PK_IN", "out": "SHIM_PK_OUT", "new": "SHIM_PK_OUT", "inout": "SHIM_PK_INOUT"}

    def check(self):
        call, p, key = self.call, self.p, self.key
        if key is None:
            self.fail("pointer parameter %s (%s) needs a note (in/out/new/inout/str)" % (p.name, self.t))
        self.elem = p.pointee()
        if self.elem == "void":
            self.elem = "unsigned char"
            if self.count is None:
                self.fail("%s:%s points to void: give a byte count" % (key, p.name))
        if "*" in self.elem:
            self.fail("%s (%s) points to pointers: not marshallable" % (p.name, self.t))
        self.ht, self.st = "SHIM_HT_NONE", "NULL"
        if self.elem in call.model.handles:
            what = "%s returns or takes a %s" % (p.name, self.elem)
            self.ht = call.handle_type(self.elem, what).enum()
        else:
            if self.elem in DPTR_TYPES and key != "out":
                self.fail("%s passes device addresses in memory: not supported" % p.name)
            if call.model.ctypes.is_record(self.elem):
                if struct_members(call.model, self.elem, call.sym, call._fail, key in ("in", "inout")):
                    self.st = "&S_%s" % self.elem
        if key == "new" and self.elem not in call.model.handles:
            self.fail("new:%s does not return a handle" % p.name)
        if key not in self.KINDS:
            self.fail("unknown note %s:%s" % (key, p.name))
        if call.sym.cls == "async" and key != "in":
            self.fail("async calls cannot return values (%s:%s)" % (key, p.name))

    def pack(self):
        pflags = self.pflags + (["SHIM_PF_DEVICE"] if self.elem in DEVICE_TYPES else [])
        return ("SHIM_P_PTR(%s, %s, %s, %s, %d, %s, %s)"
                % (self.KINDS[self.key], self.elem, self.ht, self.call.count(self.count),
                   1 if self.key == "new" else 0, self.st, " | ".join(pflags) or "0"))


# Pointer notes that are a kind of their own; every other pointer note is an Array's.
POINTER_KINDS = {"str": Str, "outstr": OutStr, "outref": OutRef}


def classify(call, i, p, key, count):
    """The kind of parameter p (position i) with its note key[count] (None when it has none)."""
    model, t = call.model, p.ctype
    # opt-in:p is in:p where NULL is the API's "none" (the driver gets NULL);
    # always-out:p is out:p written back when the call fails too.
    pflags = []
    if key == "opt-in":
        key, pflags = "in", ["SHIM_PF_OPTIONAL"]
    elif key == "always-out":
        key, pflags = "out", ["SHIM_PF_ON_ERROR"]
    if t == "CUgreenCtx" or p.pointee() in ("CUcontext", "CUgreenCtx"):
        call.fail("parameter %s is a %s: contexts live in the client, make it manual" % (p.name, t))
    if t == "CUcontext":
        return Context(call, i, p, key, count)
    by_key = {"destroys": Destroyed, "raw": Raw, "span": Span}
    if key in by_key:
        return by_key[key](call, i, p, key, count)
    if key in model.range_types and t in DPTR_TYPES:
        return MakesRange(call, i, p, key, count)
    if not p.is_pointer():
        return (Handle if t in model.handles else Scalar)(call, i, p, key, count)
    if key in POINTER_KINDS:
        return POINTER_KINDS[key](call, i, p, key, count)
    if key in model.range_types:
        return ReturnsRange(call, i, p, key, count)
    return Array(call, i, p, key, count, pflags)


def struct_members(model, tname, sym, fail, given):
    """The member table of struct type `tname` passed by pointer (rows of C initialisers):
    handles checked and mapped, host pointers that must be NULL, members passed as they are
    (opaque), device addresses naming memory of the caller's (span[N]), arrays the struct
    points to (array[n]), and for a tagged union the tag values carried with the members
    live in each. Refuses a struct with a
    pointer, handle or device address nobody described. `given`: the client hands the
    struct in (in:, inout:), so members marked checked need the call's server hook; a
    struct the server only returns is the server's own word."""
    need_hook = given and not sym.checked_ok
    if tname in model.used_structs:
        if tname in model.checked_structs and need_hook:
            fail(sym, "struct %s has members checked by hooks, but %s has no server: hook"
                 % (tname, sym.name))
        return model.used_structs[tname]
    desc = struct_desc(model, tname)
    described = dict(desc.members) if desc else {}
    in_case = {path for _, live in (desc.cases if desc else ()) for path in live}
    out, types = [], {}
    for path, what, t, in_union in model.ctypes.sensitive(tname, set(model.handles), set(DPTR_TYPES),
                                                          DEVICE_TYPES, LOCATION_TYPE):
        types[path] = t
        note = described.pop(path, None) if path else None
        if note is None and (path in in_case or (in_union and desc and desc.tag)):
            continue  # its rows are its cases'; a union member in no case is never live
        if note and note.startswith("array["):
            out.append(array_row(model, tname, path, note[6:-1], what, t, sym, fail, given))
            continue
        if what in ("device", "location") and not in_union and note is None:
            # The client's device ordinals: the server maps them to its own and back.
            out.append(member_row(model, tname, path, what, t))
        elif note == "checked" and need_hook:
            fail(sym, "struct %s: member %s is checked by a hook, but %s has no server: hook"
                 % (tname, path, sym.name))
        elif note or (what == "handle" and not in_union and t in model.handle_types):
            out.append(member_row(model, tname, path, note or "handle", t))
        else:
            fail(sym, "struct %s: member %s is a %s%s: describe it (%%struct %s %s:null|opaque|checked)"
                 % (tname, path, what, " in a union" if in_union else "", tname, path))
    for path in described:
        fail(sym, "%%struct %s: %s is not a pointer, handle or device address member" % (tname, path))
    for value, live in (desc.cases if desc else ()):
        out.append("SHIM_MEMBER_CASE(%s)" % value)
        for path, note in live.items():
            if path not in types or (note == "handle" and types[path] not in model.handle_types):
                fail(sym, "%%struct %s: case %s: %s is not a %s member"
                     % (tname, value, path, "handle" if note == "handle" else "pointer, handle or device address"))
            out.append(member_row(model, tname, path, note, types[path], value))
    if desc and desc.tag:
        model.struct_tags[tname] = desc.tag
    if desc and "checked" in desc.members.values():
        model.checked_structs.add(tname)
    model.used_structs[tname] = out
    return out


def array_row(model, tname, path, count, what, t, sym, fail, given):
    """A pointer member to `count` elements of its type (count a member beside it): the
    elements travel after the struct, their own members described as a parameter's are."""
    if what != "pointer" or t is None or not given:
        fail(sym, "struct %s: array member %s must point to typed elements the caller hands in"
             % (tname, path))
    if "." in path or count not in [m.name for m in model.ctypes.resolve(tname)[1].members]:
        fail(sym, "struct %s: array member %s: its count %s must be a member beside it"
             % (tname, path, count))
    st = "NULL"
    if model.ctypes.is_record(t) and struct_members(model, t, sym, fail, given):
        st = "&S_%s" % t
    return "SHIM_MEMBER_ARRAY(%s, %s, %s, %s, %s)" % (tname, path, count, t, st)


def member_row(model, tname, path, note, t, when=None):
    """One row of struct tname's member table: member path described as note (a kind of
    the %struct line, or handle, device, location), live only where the tag is `when`."""
    if note == "location":
        return "SHIM_MEMBER_LOCATION(%s, %s)" % (tname, path)
    if note.startswith("span["):
        macro, args = "SHIM_MEMBER_SPAN", [tname, path, note[5:-1]]
    else:
        kind = {"null": "NULL", "checked": "OPAQUE", "opaque": "OPAQUE"}.get(note, note.upper())
        ht = model.handle_types[t].enum() if note == "handle" else "SHIM_HT_NONE"
        macro, args = "SHIM_MEMBER", [tname, path, "SHIM_MK_" + kind, ht]
    if when is not None:
        macro, args = macro + "_IF", [when] + args
    return "%s(%s)" % (macro, ", ".join(args))


def struct_desc(model, tname):
    """The %struct line of struct type tname, which may name it by any of its typedefs."""
    rec = model.ctypes.resolve(tname)[1]
    desc = model.structs.get(tname)
    for s in model.structs.values():
        if desc is None and model.ctypes.resolve(s.name)[1] is rec:
            desc = s
    if desc:
        desc.used = True
    return desc
