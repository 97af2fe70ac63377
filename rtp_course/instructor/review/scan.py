"""Flag code in a submitted exercise module that reaches into the grader or around the exercise.

The source is parsed (ast), never imported or run. Every dotted reference is resolved
through the file's imports and aliases to a qualified name: `_c10d._world`, a from-imported
`_getframe`, `__import__("gc").get_objects`, `getattr(sys, "_getframe")`, `sys.modules["gc"]`,
and a module reached as another's attribute (`torch.sys.modules` is `sys.modules`, `np.os.chmod`
is `os.chmod`); it is looked up in rules.RULES by its longest matching prefix. Attribute names
that nothing honest reads (rules.ATTRS: f_back, __globals__, ...) are flagged on any object.
Strings built from constants ("rtp_" + "course", "".join, f-strings, chr, decode, a variable
holding one) are folded (fold.py) and judged like constants (rules.judge_string). A few rules
look at a statement's shape: an assignment to an attribute of an imported module or class, or
of type(x) (monkey-patching), getattr/setattr/delattr with a name that is not run-time data of
the function's own (scopes.py), a path that is an absolute constant, a ProcessGroup's C++ method.

A flag is for an instructor to read, not a verdict: each reason says what the line does and
why honest exercise code never needs it. None of solutions/, the stubs or tests/correct/ is
flagged (tests/unit/test_review_scan.py). Static analysis of Python cannot be complete: code
that computes names from run-time data, or hides its intent well enough, is not seen.
"""
from __future__ import annotations

import ast
import builtins
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from rtp_course.instructor.review.fold import Folder
from rtp_course.instructor.review.rules import (  # noqa: F401 - GRADER_NAMES: the tests'
    ASSIGN_OK, ATTRS, C10D_C, ENV_MUTATORS, ENVIRON, GLOBALS_MUTATORS, GRADER, GRADER_CLASSES,
    GRADER_NAMES, HIDDEN_MODULE, INTERCEPTORS, LOW_FILES, OUTSIDE, PATCH, PATH_FUNCS, PATH_METHODS,
    PATH_RE, PATH_ROOTS, PG_METHODS, REEXPORTED, UNPICKLE, judge_string, match as _match)
from rtp_course.instructor.review.scopes import scopes
from rtp_course.instructor.review.source import declared, finding as encoding_finding, python_text
from rtp_course.instructor.review.shapes import class_of as _class_of, const_str as _const_str, \
    from_module as _from_module, leftmost_str as _leftmost_str, targets as _targets

MAX_BYTES = 2 << 20          # an exercise module is ~30 KB; beyond this, say so rather than scan
MAX_CHAIN = 64               # longest dotted name resolved (bounds the work on a crafted file)


@dataclass(frozen=True)
class Flag:
    file: str       # the file name as the student knows it: "flyweight.py"
    line: int
    reason: str     # what the line does (why honest code never needs it)
    code: str       # a short stable id: "grader-import"

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


# ---- the scan ------------------------------------------------------------------------------------

def scan_source(source: str, filename: str) -> list[Flag]:
    """The flags of one exercise module's source, by line; [] when it does not parse (the
    checker reports a syntax error itself). In this process, unbounded but for the file's size
    and the folding's own bounds: a submission is scanned by worker.scan_impl, in a
    process of its own with CPU-time, memory and wall-time limits."""
    if len(source) > MAX_BYTES:
        return [_too_big(filename, len(source))]
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return []
    except RecursionError:                       # the parser's own depth limits
        return [_too_deep(filename)]
    except MemoryError:                          # the parser's stack, or the scan's memory
        return [_too_deep(filename, ", or too large to parse within the scan's memory: read the file")]
    if _depth(tree) > MAX_DEPTH:                 # past what the comparison with classmates can
        return [_too_deep(filename, f" (over {MAX_DEPTH} levels: no copy check could compare "
                                    f"it; read the file)")]
    scanner = _Scanner(filename)
    try:
        scanner.run(tree)
    except RecursionError:
        scanner.flags[(1, "scan-limit")] = _too_deep(filename)
    except MemoryError:
        scanner = tree = None               # what filled the memory, let go first
        return [out_of(filename, "memory")]
    return sorted(scanner.flags.values(), key=lambda f: (f.line, f.code))


def scan_file(path, filename: str | None = None) -> list[Flag]:
    """scan_source of a file, read bounded (a link to a huge file is not read whole) and decoded
    as Python decodes it (source.py: a `# coding: utf-7` line is honoured, and flagged)."""
    path = Path(path)
    filename = filename or path.name
    with open(path, "rb") as fh:
        data = fh.read(4 * MAX_BYTES + 1)           # UTF-8: at most 4 bytes a character
        if len(data) > 4 * MAX_BYTES:
            return [_too_big(filename, os.fstat(fh.fileno()).st_size)]
    flags = scan_source(python_text(data), filename)
    why = encoding_finding(data)
    if why:
        flags.insert(0, Flag(filename, declared(data)[0], why, "source-encoding"))
    return flags


def out_of(filename: str, what: str) -> Flag:
    """The flag of a file whose scan ran out of `what` ("memory", "CPU time" ...)."""
    return Flag(filename, 1, f"the file could not be scanned: the scan ran out of {what} (a file "
                             "crafted to make the scan run for ever or fill the memory, or a very "
                             "unusual one): read the file", "scan-limit")


def _too_big(filename: str, size: int) -> Flag:
    return Flag(filename, 1, f"the file could not be scanned: it holds {size >> 20} MB "
                             "(an exercise module is a few dozen KB)", "scan-limit")


MAX_DEPTH = 300     # syntax-tree levels: exercise code nests a few dozen; the similarity's
#                     normal form (recursive) stops near 1000


def _depth(tree: ast.AST) -> int:
    """The syntax tree's depth, walked without recursion."""
    deepest, todo = 0, [(tree, 1)]
    while todo:
        node, level = todo.pop()
        deepest = max(deepest, level)
        todo.extend((child, level + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _too_deep(filename: str, more: str = "") -> Flag:
    return Flag(filename, 1, "the file could not be scanned: nested too deeply" + more, "scan-limit")


class _Scanner:
    def __init__(self, filename: str):
        self.file = filename
        self.flags: dict = {}     # (line, code) -> Flag: one per line and kind, the outermost first
        self.aliases: dict = {}   # local name -> qualified name ("dist" -> "torch.distributed")
        self.bound: set = set()   # names the file binds (they shadow builtins)
        self.classes: set = set()  # the classes the file defines

    def add(self, node, code: str, reason: str) -> None:
        line = getattr(node, "lineno", 1)
        self.flags.setdefault((line, code), Flag(self.file, line, reason, code))

    def run(self, tree) -> None:
        nodes = list(ast.walk(tree))        # breadth first: an outer expression before its parts
        self.folder = Folder(nodes, self.qualify)
        self._bind(nodes)
        self.folder.cache.clear()           # folded again with every alias known
        self.local_names, self.self_name, self.stored = scopes(nodes)
        handlers = {ast.Import: self._import_stmt, ast.ImportFrom: self._import_stmt,
                    ast.Name: self._name, ast.Attribute: self._attribute, ast.Call: self._call,
                    ast.Assign: self._assign, ast.AugAssign: self._assign, ast.AnnAssign: self._assign,
                    ast.Delete: self._assign, ast.Compare: self._compare, ast.Constant: self._string,
                    ast.FunctionDef: self._def, ast.AsyncFunctionDef: self._def,
                    ast.Subscript: self._subscript, ast.BinOp: self._built, ast.JoinedStr: self._built}
        for node in nodes:
            handler = handlers.get(type(node))
            if handler:
                handler(node)
            if isinstance(node, (ast.Call, ast.Subscript)):
                self._built(node)

    def _one(self, node):
        """The one string `node` folds to, or None."""
        values = self.folder.strings(node) if hasattr(self, "folder") else None
        return next(iter(values)) if values and len(values) == 1 else None

    # -- names ----------------------------------------------------------------------------------

    def _bind(self, nodes) -> None:
        assigns = []
        for node in nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    top = a.name.split(".")[0]
                    self.aliases[a.asname or top] = a.name if a.asname else top
            elif isinstance(node, ast.ImportFrom):
                module = _from_module(node)
                for a in node.names:
                    if module and a.name != "*":
                        self.aliases[a.asname or a.name] = f"{module}.{a.name}"
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound.add(node.name)
                if isinstance(node, ast.ClassDef):
                    self.classes.add(node.name)
            elif isinstance(node, ast.arg):
                self.bound.add(node.arg)
            elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                self.bound.add(node.id)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self.bound.add(node.name)
            if isinstance(node, (ast.Assign, ast.NamedExpr)):
                assigns.append(node)
        for _ in range(3):                  # an alias of an alias (a = gc; b = a.get_objects)
            for node in assigns:
                q = self.qualify(node.value)
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if q and isinstance(t, ast.Name):
                        self.aliases.setdefault(t.id, q)

    def qualify(self, node):
        """The qualified name `node` refers to through the file's imports and aliases, or None."""
        parts = []
        while isinstance(node, ast.Attribute):
            if len(parts) >= MAX_CHAIN:
                return None
            parts.append(node.attr)
            node = node.value
        full = [self._base(node), *reversed(parts)]
        for i in range(len(full) - 1, 0, -1):       # torch.sys.modules is sys.modules
            if full[i] in REEXPORTED:
                return ".".join(full[i:])
        return ".".join(full) if full[0] else None

    def _base(self, node):
        if isinstance(node, ast.Name):
            if node.id in self.aliases:
                return self.aliases[node.id]
            if node.id not in self.bound and hasattr(builtins, node.id):
                return f"builtins.{node.id}"
            return None
        if isinstance(node, ast.Call) and node.args:    # __import__("gc").get_objects
            name, func = self._one(node.args[0]), self.qualify(node.func)
            if name and func in ("builtins.__import__", "importlib.__import__"):
                return name.split(".")[0]
            if name and func == "importlib.import_module":
                return name
            if func == "builtins.getattr" and len(node.args) >= 2:   # getattr(worker, "Ctx")
                owner, attr = self.qualify(node.args[0]), self._one(node.args[1])
                return f"{owner}.{attr}" if owner and attr else None
            if name and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                    and self.qualify(node.func.value) == "sys.modules":
                return name
        if isinstance(node, ast.Subscript):             # sys.modules["gc"].get_objects
            key = self._one(node.slice)
            if key and self.qualify(node.value) == "sys.modules":
                return key
        return None

    def _use(self, node, q: str, how: str = "uses") -> None:
        hit = _match(q)
        if hit:
            shown = q[len("builtins."):] if q.startswith("builtins.") else q
            self.add(node, hit[0], f"{how} {shown} ({hit[1]})")

    # -- handlers -------------------------------------------------------------------------------

    def _import_stmt(self, node) -> None:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif node.level > 1:
            self.add(node, "grader-import", "imports from above the exercise package, the grader's "
                                            "installation (" + GRADER + ")")
            return
        else:
            module = _from_module(node)
            names = [module] + [f"{module}.{a.name}" for a in node.names if a.name != "*"]
        for name in names:
            if name.split(".")[0] == "builtins":
                self.add(node, "builtins", "imports builtins (Python's builtins, shared with the "
                                           "grader: a change is the grader's too)")
            self._use(node, name, "imports")

    def _name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            return
        if node.id == "__builtins__":
            code, why = ATTRS["__builtins__"]
            self.add(node, code, f"uses __builtins__ ({why})")
        elif node.id == "__file__" and "__file__" not in self.bound:
            self.add(node, "outside-path", "locates files from __file__ (" + OUTSIDE + ")")
        elif node.id in self.aliases or node.id not in self.bound:
            q = self.qualify(node)
            if q:
                self._use(node, q)

    def _attribute(self, node: ast.Attribute) -> None:
        q = self.qualify(node)
        if q:                               # first: the qualified name says more than the attribute
            self._use(node, q)
        if node.attr in ATTRS:
            code, why = ATTRS[node.attr]
            self.add(node, code, f"uses .{node.attr} ({why})")
        if node.attr in REEXPORTED:
            self.add(node, "hidden-module", f"reaches the module {node.attr} as "
                     f"{ast.unparse(node.value)[:40]}.{node.attr} ({HIDDEN_MODULE})")
        if node.attr == "__dict__" and (self.qualify(node.value) or _class_of(node.value)):
            self.add(node, "introspection", f"uses {self._owner(node.value)}.__dict__ (the namespace "
                                            "of a module or class the grader uses too)")

    def _owner(self, node):
        """What `node` names when it is not the student's own: a module or class by its qualified
        name, or an object's class (type(x), x.__class__); None otherwise."""
        return self.qualify(node) or (ast.unparse(node)[:40] if _class_of(node) else None)

    def _call(self, node: ast.Call) -> None:
        func = self.qualify(node.func)
        args = node.args
        if func in ("builtins.getattr", "builtins.setattr", "builtins.delattr", "builtins.hasattr") \
                and len(args) >= 2:
            self._getattr(node, func.split(".")[1], args[0], args[1])
        elif func in ("builtins.__import__", "importlib.import_module", "importlib.__import__"):
            name = _const_str(args[0]) if args else None
            if name:
                self._use(node, name, "imports")
        elif func == "torch.load" and any(k.arg == "weights_only" and isinstance(k.value, ast.Constant)
                                          and k.value.value is False for k in node.keywords):
            self.add(node, "dynamic-code", f"calls torch.load with weights_only=False ({UNPICKLE})")
        elif func in ("builtins.open", "io.open") and args and _const_str(args[0]) is None \
                and not isinstance(args[0], ast.JoinedStr):
            self.add(node, "files", f"opens {ast.unparse(args[0])[:40]}, which may be a descriptor "
                                    f"number, not a path ({LOW_FILES})")
        elif func == "builtins.vars" and args and not self._own(node, args[0]):
            self.add(node, "introspection", f"uses vars({ast.unparse(args[0])[:40]}) (the namespace of "
                                            "an object that is not the file's own, such as a module or "
                                            "class the grader uses too)")
        if func in ("os.getenv", "os.environ.get") and args:
            self._home(node, _const_str(args[0]))
        if isinstance(node.func, ast.Attribute):
            self._method_call(node, node.func)
        if func in PATH_FUNCS or (func and func.split(".")[0] in PATH_ROOTS) or (
                isinstance(node.func, ast.Attribute) and node.func.attr in PATH_METHODS):
            for arg in args[:2]:
                path = _leftmost_str(arg)
                if path and PATH_RE.match(path):
                    self.add(node, "outside-path", f"names the path {path[:60]!r} ({OUTSIDE})")

    def _method_call(self, node: ast.Call, func: ast.Attribute) -> None:
        receiver = self.qualify(func.value)
        if func.attr in PG_METHODS and not (receiver or "").startswith("torch.distributed"):
            self.add(node, "torch-dist-internals",
                     f"calls .{func.attr}(), a ProcessGroup's C++ method, directly ({C10D_C})")
        if func.attr in ("__setattr__", "__delattr__"):     # object.__setattr__(dist, ...), dist.__setattr__
            owner = self.qualify(node.args[0]) if node.args else None
            if not owner and receiver and not receiver.startswith("builtins."):
                owner = receiver
            if owner and not f"{owner}.".startswith(ASSIGN_OK):
                self.add(node, "monkey-patch", f"calls {func.attr} on {owner} ({PATCH})")
        if receiver == "os.environ" and func.attr in ENV_MUTATORS:
            self.add(node, "environment", f"changes os.environ ({ENVIRON})")
        if func.attr in GLOBALS_MUTATORS and isinstance(func.value, ast.Call) \
                and self.qualify(func.value.func) == "builtins.globals":
            self.add(node, "monkey-patch", "rewrites the module's globals through globals() (exercise "
                                           "code defines its names with def, class and =)")

    def _getattr(self, node, fn: str, obj, name_node) -> None:
        """getattr(x, "name") is x.name; a name computed at run time hides which one."""
        owner, name = self._owner(obj), _const_str(name_node)
        names = {name} if name is not None else self.folder.strings(name_node)
        if name is None:
            hidden = self._hidden_name(node, obj, name_node, names)
            if hidden:
                self.add(node, "dynamic-code", f"calls {fn}() on {owner or 'an object'} with {hidden} "
                         "(which hides the attribute from the line: exercise code names it)")
            if names is None:
                if owner and fn in ("setattr", "delattr") and not f"{owner}.".startswith(ASSIGN_OK):
                    self.add(node, "monkey-patch", f"{fn}s attributes of {owner} ({PATCH})")
                return
        for name in sorted(names):
            if name in ATTRS:
                code, why = ATTRS[name]
                self.add(node, code, f"uses {fn}(..., {name!r}) ({why})")
            if owner:
                self._use(node, f"{owner}.{name}", f"uses, through {fn}(),")
                if fn in ("setattr", "delattr") and not f"{owner}.".startswith(ASSIGN_OK):
                    self.add(node, "monkey-patch", f"{fn}s {owner}.{name} ({PATCH})")

    def _hidden_name(self, node, obj, name_node, names):
        """How a non-literal attribute name hides itself, or None for run-time data of the
        function's own (a parameter, a loop over the model's parameters)."""
        if names:
            return "a name built from constants (" + ", ".join(map(repr, sorted(names))) + ")"
        local = self.local_names.get(id(node), set())
        held = sorted({n.id for n in ast.walk(name_node) if isinstance(n, ast.Name)
                       and n.id not in local and n.id in self.stored})
        if held:
            return "a name held in the module-level variable " + ", ".join(held)
        if self._disguised(name_node) and not self._own(node, obj):
            return "a name computed at run time"
        return None

    def _own(self, node, obj) -> bool:
        """`self` in a method of the file's classes, or a class the file defines."""
        if not isinstance(obj, ast.Name) or obj.id in self.aliases:
            return False
        return obj.id == self.self_name.get(id(node)) or obj.id in self.classes

    def _disguised(self, expr) -> bool:
        """A constant in disguise: "".join(map(chr, ...)), b64decode(...) of what does not fold."""
        if isinstance(expr, (ast.Constant, ast.Name, ast.Attribute, ast.Subscript)):
            return False
        for sub in ast.walk(expr):
            if isinstance(sub, ast.Name) and not (self.qualify(sub) or "").startswith(
                    ("builtins.", "base64", "codecs", "binascii", "zlib")):
                return False
        return True

    def _assign(self, node) -> None:
        verb = "deletes" if isinstance(node, ast.Delete) else "assigns"
        for t in _targets(node):
            if isinstance(t, ast.Attribute):
                owner = self._owner(t.value)
                if owner and not f"{owner}.".startswith(ASSIGN_OK):
                    self.add(t, "monkey-patch", f"{verb} {owner}.{t.attr} ({PATCH})")
            elif isinstance(t, ast.Subscript):
                owner = self.qualify(t.value)
                if owner == "os.environ":
                    self.add(t, "environment", f"{verb} an entry of os.environ ({ENVIRON})")
                elif isinstance(t.value, ast.Call) and self.qualify(t.value.func) == "builtins.globals":
                    self.add(t, "monkey-patch", f"{verb} a global through globals() (exercise code "
                                                "defines its names with def, class and =)")
                elif owner and owner.endswith(".__dict__"):
                    self.add(t, "monkey-patch", f"{verb} an entry of {owner} ({PATCH})")

    def _subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and self.qualify(node.value) == "os.environ":
            self._home(node, _const_str(node.slice))

    def _home(self, node, key) -> None:
        """$HOME is where the grader's caches and configuration live (outside the run)."""
        if key == "HOME":
            self.add(node, "outside-path", f"reads $HOME ({OUTSIDE})")

    def _def(self, node) -> None:
        if node.name in INTERCEPTORS:
            self.add(node, "torch-internals", f"defines {node.name} (a tensor type that intercepts "
                     "torch's operations on it, the grader's comparisons included: exercise code "
                     "returns plain tensors)")

    def _compare(self, node: ast.Compare) -> None:
        """type(o).__name__ == 'Ctx': an object of the grader's, found by walking objects."""
        operands = [node.left, *node.comparators]
        if not any(isinstance(o, ast.Attribute) and o.attr in ("__name__", "__qualname__") for o in operands):
            return
        names = set()
        for o in operands:
            elts = o.elts if isinstance(o, (ast.Tuple, ast.List, ast.Set)) else [o]
            for e in elts:
                names |= self.folder.strings(e) or set()
        for hit in sorted(n for n in names & GRADER_CLASSES if n):
            self.add(node, "grader-names", f"compares a type's name with {hit!r}, a class of the grader's "
                                           "(exercise code never meets the grader's objects)")

    def _string(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            hit = judge_string(node.value, built=False)
            if hit:
                self.add(node, hit[0], f"names {node.value.strip()!r} ({hit[1]})")

    def _built(self, node) -> None:
        """A string made from pieces ("rtp_" + "course", "".join(...), f-strings, chr, decode)."""
        for value in sorted(self.folder.strings(node) or ()):
            hit = judge_string(value, built=True)
            if hit:
                self.add(node, hit[0], f"builds the string {value.strip()!r} from pieces ({hit[1]})")

