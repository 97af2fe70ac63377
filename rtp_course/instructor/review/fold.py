"""The values of string expressions built from constants, as the scan sees them without running them.

`"rtp_" + "course"`, `"".join(["f_", "back"])`, f"{'tb'}_frame", `chr(103) + chr(99)`,
`bytes([103, 99]).decode()`, `"kcab_f"[::-1]`, `"%s.%s" % (a, b)`, a name assigned such a
value anywhere in the file (`TB = "tb_" + "frame"`, then `getattr(tb, TB)`), `base64.b64decode`
of a constant, `codecs.decode(s, "rot13")`: each folds to the set of strings it can be. An
expression that depends on anything else (a parameter, a loop over data, a call of the file's
own functions) does not fold (None). The work is bounded: a fold is at most MAX_DEPTH deep, a
value at most MAX_LEN long, at most MAX_VALUES alternatives; a decoder is given at most MAX_LEN
characters and may give at most MAX_LEN back. Nothing that expands data is ever run: codecs'
compressors (bz2, zlib ...) do not fold, only the text codecs in TEXT_CODECS, whose output is a
small multiple of their input (a 2 KB bz2 constant decompresses to gigabytes; rules.py still
flags codecs.decode as decoding hidden data).
"""
from __future__ import annotations

import ast
import base64
import codecs
import encodings
import itertools
import re

MAX_DEPTH = 80
MAX_LEN = 2000
MAX_VALUES = 16
# str and bytes methods whose result is no longer than what they are given times a small factor
METHODS = set("join format decode encode lower upper strip lstrip rstrip replace title capitalize "
              "casefold swapcase removeprefix removesuffix split rsplit partition rpartition".split())
BUILTINS = {"chr", "str", "bytes", "bytearray", "reversed", "list", "tuple", "ord", "int"}
# codecs' codecs that keep a value's size within a small factor, by every name codecs knows them
# by (normalised): the one a call names is looked up here, and the codec run is the canonical
# one, never what the name might otherwise resolve to.
TEXT_CODECS = {encodings.normalize_encoding(name): canonical
               for canonical in ("rot_13", "hex_codec", "base64_codec", "utf_8", "latin_1", "ascii")
               for name in [canonical, *(k for k, v in encodings.aliases.aliases.items() if v == canonical)]}


def _codec(name) -> str:
    """The canonical text codec `name` stands for; _Unknown for any other (bz2_codec, zlib_codec,
    uu_codec: they decompress, or may)."""
    if not isinstance(name, str) or len(name) > 40:
        raise _Unknown
    canonical = TEXT_CODECS.get(encodings.normalize_encoding(name.strip().lower()))
    if canonical is None:
        raise _Unknown
    return canonical


def _codecs_call(fn):
    def call(data, encoding="utf-8", errors="strict"):
        if not isinstance(errors, str) or errors not in ("strict", "ignore", "replace"):
            raise _Unknown
        return fn(data, _codec(encoding), errors)
    return call


def _bounded(decoder):
    """`decoder` run only on what is at most MAX_LEN long (the result is held to it by _ok)."""
    def call(*args):
        if any(not isinstance(a, (str, bytes, int)) or not isinstance(a, int) and len(a) > MAX_LEN
               for a in args):
            raise _Unknown
        return decoder(*args)
    return call


DECODERS = {q: _bounded(f) for q, f in {
    "base64.b64decode": base64.b64decode, "base64.b32decode": base64.b32decode,
    "base64.b16decode": base64.b16decode, "base64.urlsafe_b64decode": base64.urlsafe_b64decode,
    "base64.standard_b64decode": base64.standard_b64decode, "base64.b85decode": base64.b85decode,
    "base64.a85decode": base64.a85decode, "base64.decodebytes": base64.decodebytes,
    "codecs.decode": _codecs_call(codecs.decode), "codecs.encode": _codecs_call(codecs.encode),
    "binascii.unhexlify": bytes.fromhex, "binascii.a2b_hex": bytes.fromhex,
    "builtins.bytes.fromhex": bytes.fromhex}.items()}
_WIDE = re.compile(r"\d{4,}|\*")          # a format that pads to thousands of characters


def _times(a, b):
    n = b if isinstance(b, int) else a if isinstance(a, int) else 1
    seq = a if isinstance(b, int) else b
    if not isinstance(seq, int) and len(seq) * n > MAX_LEN:
        raise _Unknown
    return a * b


_OPS = {ast.Add: lambda a, b: a + b, ast.Mod: lambda a, b: a % b, ast.Mult: _times,
        ast.Sub: lambda a, b: a - b}


class _Unknown(Exception):
    pass


def _ok(v):
    if isinstance(v, bool) or not isinstance(v, (str, bytes, int, tuple)):
        raise _Unknown
    if isinstance(v, int) and abs(v) > 1 << 21 or not isinstance(v, int) and len(v) > MAX_LEN:
        raise _Unknown
    if isinstance(v, tuple):
        for x in v:
            _ok(x)
    return v


def _product(options):
    """Every combination of the alternatives, bounded."""
    out = []
    for combo in itertools.product(*options):
        out.append(combo)
        if len(out) > MAX_VALUES:
            raise _Unknown
    return out


class Folder:
    def __init__(self, nodes, qualify):
        self.qualify = qualify              # the scanner's: a callee's qualified name
        self.env: dict = {}                 # name -> every expression assigned to it
        self.opaque: set = set()            # names also bound otherwise (a parameter, an import ...)
        self.cache: dict = {}
        for node in nodes:
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    self._bind(t, node.value)
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                iterable = node.iter
                items = iterable.elts if isinstance(iterable, (ast.Tuple, ast.List, ast.Set)) else None
                if isinstance(node.target, ast.Name) and items is not None:
                    self.env.setdefault(node.target.id, []).extend(items)
                else:
                    self._opaque(node.target)
            elif isinstance(node, (ast.AugAssign, ast.withitem, ast.Delete)):
                for t in ([node.optional_vars] if isinstance(node, ast.withitem) else
                          node.targets if isinstance(node, ast.Delete) else [node.target]):
                    self._opaque(t)
            elif isinstance(node, ast.arg):
                self.opaque.add(node.arg)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self.opaque |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.opaque.add(node.name)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self.opaque.add(node.name)

    def _bind(self, target, value) -> None:
        if isinstance(target, ast.Name):
            self.env.setdefault(target.id, []).append(value)
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
                and len(target.elts) == len(value.elts):
            for t, v in zip(target.elts, value.elts):
                self._bind(t, v)
        else:
            self._opaque(target)

    def _opaque(self, target) -> None:
        for sub in ast.walk(target) if target is not None else ():
            if isinstance(sub, ast.Name):
                self.opaque.add(sub.id)

    # -- folding ----------------------------------------------------------------------------

    def strings(self, node):
        """The strings `node` can be (a set), or None when it is not built from constants alone."""
        try:
            values = self._fold(node, {}, 0)
        except (_Unknown, RecursionError):
            return None
        except MemoryError:                 # the scan's limit: not a value that does not fold
            raise
        except Exception:                   # noqa: BLE001 - what the folded operation raised
            return None
        out = set()
        for v in values:
            if isinstance(v, bytes):
                try:
                    v = v.decode("utf-8")
                except UnicodeDecodeError:
                    return None
            if not isinstance(v, str):
                return None
            out.add(v)
        return out

    def _fold(self, node, bound, depth):
        if depth > MAX_DEPTH:
            raise _Unknown
        d = depth + 1
        if isinstance(node, ast.Constant):
            return [_ok(node.value)]
        if isinstance(node, ast.Name):
            if node.id in bound:
                return [bound[node.id]]
            return self._name(node.id, d)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return [_ok(-v) for v in self._fold(node.operand, bound, d) if isinstance(v, int)]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            op = _OPS[type(node.op)]
            if isinstance(node.op, ast.Mod) and any(isinstance(v, str) and _WIDE.search(v)
                                                    for v in self._fold(node.left, bound, d)):
                raise _Unknown
            return [_ok(op(a, b)) for a, b in _product([self._fold(node.left, bound, d),
                                                         self._fold(node.right, bound, d)])]
        if isinstance(node, (ast.Tuple, ast.List)):
            return [tuple(c) for c in _product([self._fold(e, bound, d) for e in node.elts])]
        if isinstance(node, ast.JoinedStr):
            return ["".join(c) for c in _product([self._fold(v, bound, d) for v in node.values])]
        if isinstance(node, ast.FormattedValue):
            specs = self._fold(node.format_spec, bound, d) if node.format_spec else [""]
            if any(_WIDE.search(s) for s in specs):
                raise _Unknown
            conv = {-1: lambda v: v, 115: str, 114: repr, 97: ascii}[node.conversion]
            return [_ok(format(conv(v), s)) for v, s in _product([self._fold(node.value, bound, d), specs])]
        if isinstance(node, ast.Subscript):
            index = node.slice
            if isinstance(index, ast.Slice):
                parts = [self._fold(p, bound, d) if p else [None] for p in (index.lower, index.upper, index.step)]
                return [_ok(v[slice(*s)]) for v, *s in _product([self._fold(node.value, bound, d), *parts])]
            return [_ok(v[i]) for v, i in _product([self._fold(node.value, bound, d),
                                                    self._fold(index, bound, d)])]
        if isinstance(node, (ast.GeneratorExp, ast.ListComp)) and len(node.generators) == 1:
            gen = node.generators[0]
            if isinstance(gen.target, ast.Name) and not gen.ifs:
                out = []
                for seq in self._fold(gen.iter, bound, d):
                    if not isinstance(seq, (str, bytes, tuple)):
                        raise _Unknown
                    options = [self._fold(node.elt, {**bound, gen.target.id: x}, d) for x in seq]
                    out += [tuple(c) for c in _product(options)]
                return out
        if isinstance(node, ast.Call) and not node.keywords:
            return self._call(node, bound, d)
        raise _Unknown

    def _name(self, name, depth):
        if name in self.opaque or name not in self.env:
            raise _Unknown
        if name not in self.cache:
            self.cache[name] = None                     # a cycle (a = a + "x") does not fold
            out = []
            for value in self.env[name]:
                out += [v for v in self._fold(value, {}, depth) if v not in out]
            if len(out) > MAX_VALUES:
                raise _Unknown
            self.cache[name] = out
        if self.cache[name] is None:
            raise _Unknown
        return self.cache[name]

    def _call(self, node, bound, d):
        func = node.func
        q = self.qualify(func) or ""
        if q not in DECODERS and not q.startswith("builtins.") and isinstance(func, ast.Attribute) \
                and func.attr in METHODS:
            q = ""                                  # a str method: "".join, "ab".replace
        if q == "builtins.map" and len(node.args) == 2 and self.qualify(node.args[0]) in (
                "builtins.chr", "builtins.str"):
            conv = chr if self.qualify(node.args[0]) == "builtins.chr" else str
            return [_ok(tuple(conv(x) for x in seq)) for seq in self._fold(node.args[1], bound, d)]
        if not q and not isinstance(func, ast.Attribute) or q and q not in DECODERS and not (
                q.startswith("builtins.") and q[9:] in BUILTINS):
            raise _Unknown
        args = [self._fold(a, bound, d) for a in node.args]
        if not q:
            receivers = self._fold(func.value, bound, d)
            if func.attr == "format" and any(isinstance(r, str) and _WIDE.search(r) for r in receivers):
                raise _Unknown
            return [_ok(getattr(r, func.attr)(*a)) for r, *a in _product([receivers, *args])
                    if isinstance(r, (str, bytes))]
        if q in DECODERS:
            return [_ok(DECODERS[q](*a)) for a in _product(args)]
        fn = q[9:]
        if fn in ("bytes", "bytearray") and args and any(isinstance(a, int) for a in args[0]):
            raise _Unknown                          # bytes(n): n zeros, no name
        impl = {"chr": chr, "str": str, "bytes": bytes, "ord": ord, "int": int, "bytearray": bytes,
                "reversed": lambda x: tuple(reversed(x)), "list": tuple, "tuple": tuple}.get(fn)
        if impl is None:
            raise _Unknown
        return [_ok(impl(*a)) for a in _product(args)]
