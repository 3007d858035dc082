"""Types of cuda.h, for gen/gen.py: typedefs, structs and unions with their members.

Reads the preprocessed header (one long line) far enough to answer what the generator
asks: which members of a struct passed by pointer are pointers, handles or device
addresses, at what path (`a.b` for nested members), and whether a union lies on the way.
Function prototypes are not parsed here (gen/cuda_h.py reads them with a pattern of its own).
"""

import re

TOKEN_RE = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|\.\.\.|->|[{}()\[\];,*=:<>+\-/&|^~!?.]|\S")
BUILTIN = {"void", "char", "short", "int", "long", "float", "double", "signed", "unsigned",
           "_Bool", "__int128"}
QUALIFIERS = {"const", "volatile", "restrict", "__restrict", "__restrict__", "extern", "static",
              "inline", "__inline", "__extension__"}


class ParseError(Exception):
    pass


class Member:
    def __init__(self, name, spec, pointer, array, funcptr):
        self.name = name          # None for an anonymous struct/union member
        self.spec = spec          # ("name", T) | ("builtin", text) | ("record", Record)
        self.pointer = pointer    # pointer declarator (any level)
        self.array = array        # array declarator
        self.funcptr = funcptr    # function pointer


class Record:
    def __init__(self, kind, tag):
        self.kind = kind          # "struct" or "union"
        self.tag = tag
        self.members = []


class CTypes:
    def __init__(self, text):
        self.toks = TOKEN_RE.findall(text)
        self.typedefs = {}        # name -> (spec, pointer)
        self.tags = {}            # struct/union tag -> Record
        self._parse()

    # ------------------------------------------------------------ parsing

    def _skip_balanced(self, i, open_, close):
        depth = 0
        while i < len(self.toks):
            t = self.toks[i]
            if t == open_:
                depth += 1
            elif t == close:
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        raise ParseError("unbalanced %s" % open_)

    def _parse(self):
        toks, i = self.toks, 0
        while i < len(toks):
            t = toks[i]
            if t == "typedef":
                i = self._typedef(i + 1)
            elif t in ("struct", "union") and self._has_body(i):
                spec, i = self._spec(i)
                # `struct X { ... };` or a declaration using it: skip to the end.
                i = self._to_semicolon(i)
            elif t == "{":
                i = self._skip_balanced(i, "{", "}")
            else:
                i += 1

    def _has_body(self, i):
        j = i + 1
        if j < len(self.toks) and re.match(r"[A-Za-z_]", self.toks[j]):
            j += 1
        return j < len(self.toks) and self.toks[j] == "{"

    def _to_semicolon(self, i):
        toks = self.toks
        while i < len(toks) and toks[i] != ";":
            if toks[i] in ("{", "(", "["):
                i = self._skip_balanced(i, toks[i], {"{": "}", "(": ")", "[": "]"}[toks[i]])
            else:
                i += 1
        return i + 1

    def _spec(self, i):
        """A type specifier at i: returns (spec, next index)."""
        toks = self.toks
        words = []
        i = self._skip_qualifiers(i)
        t = toks[i]
        if t in ("struct", "union", "enum"):
            kind = t
            i += 1
            tag = None
            if re.match(r"[A-Za-z_]", toks[i]):
                tag = toks[i]
                i += 1
            if toks[i] == "{":
                if kind == "enum":
                    i = self._skip_balanced(i, "{", "}")
                    return ("builtin", "int"), i
                rec = Record(kind, tag)
                end = self._skip_balanced(i, "{", "}")
                self._members(rec, i + 1, end - 1)
                if tag:
                    self.tags[tag] = rec
                i = end
                return ("record", rec), self._skip_qualifiers(i)
            if kind == "enum":
                return ("builtin", "int"), self._skip_qualifiers(i)
            return ("tag", tag), self._skip_qualifiers(i)
        while i < len(toks) and (toks[i] in BUILTIN or toks[i] in QUALIFIERS):
            if toks[i] in BUILTIN:
                words.append(toks[i])
            i += 1
        if words:
            return ("builtin", " ".join(words)), i
        return ("name", toks[i]), self._skip_qualifiers(i + 1)

    def _skip_qualifiers(self, i):
        while i < len(self.toks):
            if self.toks[i] in QUALIFIERS:
                i += 1
            elif self.toks[i] in ("_Alignas", "__attribute__", "__declspec") and \
                    self.toks[i + 1] == "(":
                i = self._skip_balanced(i + 1, "(", ")")
            else:
                break
        return i

    def _declarator(self, i):
        """Returns (name, pointer, array, funcptr, next index)."""
        toks = self.toks
        pointer = array = funcptr = False
        while toks[i] in ("*",) or toks[i] in QUALIFIERS:
            if toks[i] == "*":
                pointer = True
            i += 1
        name = None
        if toks[i] == "(":
            # Function pointer (or a parenthesised declarator): ( * name ) ( params )
            close = self._skip_balanced(i, "(", ")")
            inner = [t for t in toks[i + 1:close - 1] if t not in QUALIFIERS]
            names = [t for t in inner if re.match(r"[A-Za-z_]\w*$", t)]
            name = names[-1] if names else None
            funcptr = "*" in inner
            i = close
            if toks[i] == "(":
                i = self._skip_balanced(i, "(", ")")
                funcptr = True
        elif re.match(r"[A-Za-z_]\w*$", toks[i]):
            name = toks[i]
            i += 1
        while i < len(toks) and toks[i] == "[":
            array = True
            i = self._skip_balanced(i, "[", "]")
        if i < len(toks) and toks[i] == ":":  # bit-field width
            i += 1
            while toks[i] not in (",", ";"):
                i += 1
        return name, pointer, array, funcptr, i

    def _members(self, rec, i, end):
        toks = self.toks
        while i < end:
            if toks[i] == ";":
                i += 1
                continue
            spec, i = self._spec(i)
            while True:
                if toks[i] == ";":
                    if spec[0] == "record":  # anonymous struct/union member
                        rec.members.append(Member(None, spec, False, False, False))
                    break
                name, pointer, array, funcptr, i = self._declarator(i)
                rec.members.append(Member(name, spec, pointer, array, funcptr))
                if toks[i] == ",":
                    i += 1
                    continue
                break
            if toks[i] != ";":
                raise ParseError("member list of %s: expected ';' near '%s'"
                                 % (rec.tag, " ".join(toks[i:i + 8])))
            i += 1

    def _typedef(self, i):
        spec, i = self._spec(i)
        toks = self.toks
        while True:
            name, pointer, array, funcptr, i = self._declarator(i)
            if name:
                self.typedefs[name] = (spec, pointer or funcptr)
            if toks[i] == ",":
                i += 1
                continue
            break
        return self._to_semicolon(i)

    # ------------------------------------------------------------ queries

    def resolve(self, name):
        """Follows typedefs: ("record", Record) for a struct or union, ("pointer", None) for a
        pointer typedef, ("name", T) for anything else (a builtin or an unknown name)."""
        seen = set()
        spec = ("name", name)
        while True:
            if spec[0] == "record":
                return spec
            if spec[0] == "tag":
                rec = self.tags.get(spec[1])
                return ("record", rec) if rec else ("name", spec[1])
            if spec[0] == "builtin":
                return ("name", spec[1])
            n = spec[1]
            if n in seen or n not in self.typedefs:
                return ("name", n)
            seen.add(n)
            spec, pointer = self.typedefs[n]
            if pointer:
                return ("pointer", n)

    def is_record(self, name):
        return self.resolve(name)[0] == "record"

    def sensitive(self, name, handles, dptrs, devices=(), location=None):
        """Members of record type `name` that carry pointers, handles or device addresses,
        at any depth: [(path, what, type name, in_union)], `what` being "pointer", "handle"
        or "dptr", "device" (a type of `devices`), or "location" (a record of type
        `location`, whole: its path ends with "." or is "" for the record itself). Arrays of
        them are reported as "pointer" (not describable)."""
        out = []
        kind, rec = self.resolve(name)
        if kind != "record":
            return out
        loc = self.resolve(location)[1] if location else None
        if loc is not None and rec is loc:
            return [("", "location", name, False)]

        def walk(rec, prefix, in_union):
            union = in_union or rec.kind == "union"
            for m in rec.members:
                path = prefix + m.name if m.name else prefix.rstrip(".") or None
                tname = m.spec[1] if m.spec[0] in ("name", "tag") else None
                if m.funcptr or m.pointer:
                    out.append((path, "pointer", tname, union))
                    continue
                if m.spec[0] == "record":
                    walk(m.spec[1], (path + ".") if m.name else prefix, union)
                    continue
                if tname in devices:
                    out.append((path, "pointer" if m.array else "device", tname, union))
                    continue
                if loc is not None and tname and self.resolve(tname)[1] is loc:
                    out.append((path + ".", "pointer" if m.array else "location", tname, union))
                    continue
                if tname in handles or tname in dptrs:
                    out.append((path, "pointer" if m.array else
                                ("handle" if tname in handles else "dptr"), tname, union))
                    continue
                if tname:
                    r = self.resolve(tname)
                    if r[0] == "pointer":
                        # a pointer typedef that is not a handle: a host pointer (callbacks)
                        out.append((path, "pointer", tname, union))
                    elif r[0] == "record":
                        walk(r[1], path + ".", union)

        walk(rec, "", False)
        return out
