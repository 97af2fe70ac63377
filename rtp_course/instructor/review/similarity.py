"""Token fingerprints that survive renaming, comments, docstrings and reformatting (winnowing, as MOSS).

A source is first normalised as a syntax tree (`normalize`), then written out again
(`ast.unparse`: one layout, no comment): identity wrappers are inlined (a function of the
file's whose body only returns one of its parameters, `(lambda x: x)(...)`, called anywhere:
`_i(dist).all_reduce(_i(t))` is `dist.all_reduce(t)`), `getattr(x, "name")` is `x.name`,
and dead code is dropped (`if False:` and `while 0:` blocks, statements after a `return` or
`raise`, docstrings, a function's stores to names the file never reads, and elsewhere such
stores of a value that calls nothing: `_n = 0`, `_n += 1`, `_a, _b = x`, `del _a`), and so are
padding statements (a padder's no-ops between copied ones, each breaking up every k-gram that
spans it): an expression statement whose value is discarded and only reads or asks (`x`,
`x.shape`, `len(x)`, `torch.is_tensor(x)`, `x.size(0)`, a module's function with written-out
arguments or none, `torch.is_grad_enabled()`, `os.getpid()`, `dist.barrier()`: `_inert`),
`pass`, `assert True`, and the blocks that run their body once as it is (`if True:`, `if 1 ==
1:`, `for _ in range(1):`, `with nullcontext():`, `try: ... finally: pass`) give way to it; a
name bound once to a constant is that constant there (`time.sleep(_NAP)` with `_NAP = 0`).
What takes the file's own data (`dist.all_reduce(t)`, `t.add_(1)`, `work.wait()`) stays.
Spellings and orders that say the same are made one first (`_Canonical`: `b > a` is `a < b`,
`type(x).m(x)` is `x.m()`, a loop of `r.append(e)` is the comprehension, a `while` that counts
is its `for`, `sum((a, b))` is `a + b`, ...), and temporaries are inlined
(`_inline_temporaries`: `_t1 = g(x); y = f(_t1)` is `y = f(g(x))`).
Names moved onto an object are moved back: a holder (a name bound once, to a call with no
positional argument, `_s = SimpleNamespace(x=x)`, and otherwise only read as the root of an
attribute) gives way to its attributes (`_s.x` is `x`, and `x = x` is gone).

It then becomes a sequence of normalised tokens (`tokenize`): comments, line structure,
trailing commas, grouping parentheses, docstrings and do-nothing statements (`pass`, a store
to a name never read, a bare `print(...)`: padding between copied lines) are dropped; every
name the file defines (variables, parameters, functions, classes, the attributes it assigns)
becomes "V", every string "S" and number "N", every keyword argument's name "V"; keywords,
builtins, operators, the attribute names of the APIs used (`.all_reduce`, `.grad`) and
imported names, spelled in full whatever their alias (`dist.send` and a from-imported `send`
are both `torch . distributed . send`), are kept: they carry the algorithm. A chain of the
file's own names (`self.weight`, `_G.x`: a root that is no import, then attributes that the
file assigns) is one "V", and a line that only gives a name another (`y = x`) is dropped, so
that names moved onto an object that is not a holder (a module-level one) are names again.

Each run of K tokens within one definition (so that reordering functions changes nothing) is
hashed; winnowing keeps the smallest hash of every W consecutive ones, so any shared run of at
least W + K - 1 tokens is found. The stub a student started from is the base: its k-grams are
taken out before winnowing, so the interface everyone was given counts for nothing.
"""
from __future__ import annotations

import ast
import builtins
import hashlib
import io
import keyword
import tokenize
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

K = 13              # tokens per k-gram: about one statement, so shared idioms rarely match alone
W = 5               # winnowing window: any shared run of W + K - 1 = 17 tokens is found
FLOOR = 20          # the smaller set counts as at least this many fingerprints (see similarity)
# Score at or above which a pair is a near copy, calibrated in tests/unit/test_review_similarity.py:
# the reference renamed, reformatted, reordered, identity-wrapped, padded with dead code or
# no-op statements, its locals moved onto a namespace, flattened into temporaries, its loops
# and tests spelled otherwise, its comments and docstrings changed scores 0.97-1.0 against itself;
# its correct alternatives (tests/correct/: edits of it) 0.66-1.0, median 0.96; independent
# implementations 0.03-0.21, the highest where the stub all but dictates the code (comm,
# data_parallel; the tests' own comm, groups, rotation and data_parallel ones: 0.03-0.21).
NEAR_COPY = 0.5

_MOD = (1 << 61) - 1
_BASE = 1_000_003
_BUILTINS = set(dir(builtins))
# Builtins whose call, as a statement of its own, changes nothing the program reads later.
_PURE = {"print", "len", "id", "repr", "str", "int", "float", "bool", "abs", "isinstance", "hasattr",
         "type", "min", "max", "sum", "sorted", "list", "tuple", "dict", "set", "range", "hash", "ord",
         "chr", "round", "format", "callable", "dir", "vars", "bin", "hex", "oct", "divmod", "pow",
         "any", "all", "zip", "map", "filter", "reversed", "enumerate", "frozenset", "bytes", "object"}
_ASSIGN = {"=", ":", "+=", "-=", "*=", "/=", "//=", "%=", "**=", "|=", "&=", "^=", "<<=", ">>=", "@="}
_DROP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
         tokenize.ENCODING, tokenize.ENDMARKER}
_FSTRING = tuple(getattr(tokenize, n) for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")
                 if hasattr(tokenize, n))          # Python 3.12: an f-string is several tokens


@dataclass(frozen=True)
class Pair:
    a: str              # a student id
    b: str              # another student id, or "reference"
    exercise: str
    score: float        # similarity() of their fingerprints, in [0, 1]
    near_copy: bool     # score >= NEAR_COPY
    where: str = ""     # where a's copy sits when not in its exercise's module ("sharding.py")

    HEADER = ("a", "b", "exercise", "score", "near_copy")

    def as_row(self) -> list:
        return [self.a, self.b, self.exercise, f"{self.score:.3f}", "yes" if self.near_copy else "no"]


# ---- the syntax tree ----------------------------------------------------------------------------

MAX_SOURCE = 2 << 20            # longer sources are tokenized as they are (the scan says so)
MAX_PASSES = 8                  # wrappers of wrappers: inlined a pass at a time
MAX_FOLD = 32                   # deepest expression folded to a constant (_value)
MAX_ROUNDS = 3                  # temporaries inlined, then spellings made one, again
MAX_CHAIN = 32                  # temporaries inlined one into the next (the depth they add)
_HOISTED = (ast.Call, ast.BinOp, ast.Name)   # what a temporary holds (any value, if returned)


def normalize(source: str) -> str:
    """`source` with identity wrappers inlined and dead code dropped, as ast.unparse writes it;
    `source` itself when it does not parse."""
    return _normalized(source)[0]


def _normalized(source: str):
    """(normalize(source), its syntax tree); (source, None) when it does not parse."""
    if len(source) > MAX_SOURCE:
        return source, None
    try:
        tree = ast.parse(source)
        tree = _Canonical(tree, split=False).visit(tree)  # `a, b = _t1, _t2`: split once inlined
        nodes = list(ast.walk(tree))
        tree.body = _live_block(tree.body, set(), _scope(nodes), False, keep_one=False)
        nodes = list(ast.walk(tree))        # dead code out first: `return x` then padding
        for _ in range(MAX_PASSES):
            identities = _identities(nodes)
            if not any(_replacement(n, identities) for n in nodes if isinstance(n, ast.Call)):
                break
            tree = _Inline(identities).visit(tree)
            nodes = list(ast.walk(tree))
        gone = set(identities[0])           # methods stay: torch may call them (forward)
        tree = _Unhold(tree).visit(tree)    # `_s = SimpleNamespace(); _s.x = x; ... _s.x`: x
        for again in range(MAX_ROUNDS):     # `_t = [...]; return _t` once a loop is a comprehension
            if not _inline_temporaries(tree) and again:
                break
            tree = _Canonical(tree).visit(tree)   # `_s.a, _s.b = x, y` is now `a, b = x, y`
        nodes = list(ast.walk(tree))
        tree.body = _live_block(tree.body, gone, _scope(nodes), False, keep_one=False)
        return ast.unparse(tree), tree
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return source, None
    except Exception:                       # noqa: BLE001 - a crafted file ends no review
        return source, None


_BINARY = {"add": ast.Add, "sub": ast.Sub, "mul": ast.Mult, "truediv": ast.Div,
           "floordiv": ast.FloorDiv, "mod": ast.Mod, "pow": ast.Pow, "matmul": ast.MatMult,
           "lshift": ast.LShift, "rshift": ast.RShift, "and_": ast.BitAnd, "or_": ast.BitOr,
           "xor": ast.BitXor}
_UNARY = {"neg": ast.USub, "pos": ast.UAdd, "invert": ast.Invert, "not_": ast.Not}
_COMPARE = {"eq": ast.Eq, "ne": ast.NotEq, "lt": ast.Lt, "le": ast.LtE, "gt": ast.Gt,
            "ge": ast.GtE, "is_": ast.Is, "is_not": ast.IsNot}


def _operator_names(nodes) -> dict:
    """{name in the file: the operator module's function it is} (`import operator as _op`:
    `_op.mul` is 'mul'; `from operator import mul as m`: `m` is 'mul'), as ('module', alias)
    for the module; nodes: the file's, ast.walk's."""
    names = {}
    for n in nodes:
        if isinstance(n, ast.Import):
            names.update({(a.asname or a.name): "" for a in n.names if a.name == "operator"})
        elif isinstance(n, ast.ImportFrom) and n.module == "operator":
            names.update({(a.asname or a.name): a.name for a in n.names})
    return names


def _operator_call(node, names):
    """`operator.mul(a, b)` (or an alias) as `a * b`, `getitem(a, i)` as `a[i]`, ...; None."""
    f = node.func
    op = (names.get(f.id) if isinstance(f, ast.Name) else
          f.attr if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
          and names.get(f.value.id) == "" else None)
    a = node.args
    if not op or node.keywords or any(isinstance(x, ast.Starred) for x in a):
        return None
    if op in _BINARY and len(a) == 2:
        return ast.BinOp(a[0], _BINARY[op](), a[1])
    if op in _UNARY and len(a) == 1:
        return ast.UnaryOp(_UNARY[op](), a[0])
    if op in _COMPARE and len(a) == 2:
        return ast.Compare(a[0], [_COMPARE[op]()], [a[1]])
    if op == "getitem" and len(a) == 2:
        return ast.Subscript(a[0], a[1], ast.Load())
    return None


class _Canonical(ast.NodeTransformer):
    """Spellings that say the same thing, made one, before anything else: annotations dropped
    (a bare one in a function is then dead), `f(*(a, b))` as `f(a, b)`, `torch.Tensor.m(x, ...)`,
    `type(x).m(x, ...)` and `x.__class__.m(x, ...)` as `x.m(...)`, `x.size(i)` as `x.shape[i]`
    (`x.size()` as `x.shape`), `list(map(lambda v: e, xs))` as `[e for v in xs]`, a loop that
    only appends to a list made empty just before it (`r = []`, then `for v in xs: if c:
    r.append(e)`; a set's `add`, a dict's `r[k] = v`) as the comprehension, `a, b = x, y`
    (names or attributes the right does not read) as two assignments, `operator.mul(a, b)` as
    `a * b`, `bool(c)` as a test (`if`, `while`, `assert`, a comprehension's `if`) as `c`;
    and orders made one: the operands of `*`, `&`, `|`, `^` and of `+` (but where one is a
    string, list or tuple written out: a concatenation), a comparison's sides (`b > a` is
    `a < b`), the operands of `and`/`or` where none calls anything but a builtin that only
    reads, and a call's keyword arguments, each by the operands' `_Shape` (what tokens they
    become, whatever the file names its own things), then, where that is the same, by their
    text."""

    def __init__(self, tree, split=True):
        nodes = list(ast.walk(tree))
        self.split = split
        self.operators = _operator_names(nodes)
        self.shape = _Shape(_names(tree, nodes), _bound(nodes))
        self.bound = self.shape.bound
        self.methods = {f.name for c in nodes if isinstance(c, ast.ClassDef) for f in c.body
                        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def visit_arg(self, node):
        node.annotation = None
        return node

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        node.returns = None
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node):
        self.generic_visit(node)
        if node.value is None:
            return node
        return ast.copy_location(ast.Assign([node.target], node.value), node)

    def generic_visit(self, node):
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and len(block) > 1 and isinstance(block[0], ast.stmt):
                setattr(node, field, self._comprehensions(self._loops(block)))
        return node

    # -- tests, operands and keywords in one order --------------------------------------------

    def _test(self, node):
        """A condition less `bool(...)` around it or its parts (`not bool(c)`, `bool(a) and b`)."""
        while isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "bool" \
                and "bool" not in self.bound and len(node.args) == 1 and not node.keywords \
                and not isinstance(node.args[0], ast.Starred):
            node = node.args[0]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            node.operand = self._test(node.operand)
        elif isinstance(node, ast.BoolOp):
            node.values = [self._test(v) for v in node.values]
            node = self._ordered(node)
        return node

    def visit_If(self, node):
        self.generic_visit(node)
        node.test = self._test(node.test)
        return self._unnegated(node) if isinstance(node, ast.If) else node

    visit_While = visit_IfExp = visit_Assert = visit_If

    @staticmethod
    def _unnegated(node):
        """`if not c: A else: B` as `if c: B else: A`, `if c: pass else: A` as `if not c: A`, an
        `else: pass` dropped (undoes A03's `if c: A` written `if not c: pass else: A`)."""
        negated = isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not)
        if node.orelse and negated:
            node.test, node.body, node.orelse = node.test.operand, node.orelse, node.body
        elif node.orelse and all(isinstance(s, ast.Pass) for s in node.body):
            node.test, node.body, node.orelse = ast.UnaryOp(ast.Not(), node.test), node.orelse, []
        if all(isinstance(s, ast.Pass) for s in node.orelse):
            node.orelse = []
        return node

    def visit_comprehension(self, node):
        self.generic_visit(node)
        node.ifs = [self._test(c) for c in node.ifs]
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        return self._ordered(node)

    visit_Compare = visit_BoolOp = visit_BinOp

    def _ordered(self, node):
        """`node` (a BinOp, Compare or BoolOp) with its operands in the one order."""
        key = self.shape.key
        if isinstance(node, ast.BinOp) and isinstance(node.op, _COMMUTATIVE) \
                and not (isinstance(node.op, ast.Add) and (_sequence(node.left) or _sequence(node.right))):
            left, right = key(node.left), key(node.right)
            if right < left or right == left and ast.dump(node.right) < ast.dump(node.left):
                node.left, node.right = node.right, node.left
        elif isinstance(node, ast.Compare) and all(type(op) in _FLIP for op in node.ops):
            operands = [node.left, *node.comparators]
            back = [_FLIP[type(op)]() for op in reversed(node.ops)]
            ahead = ([key(o) for o in operands], [_RANK[type(op)] for op in node.ops])
            turned = ([key(o) for o in reversed(operands)], [_RANK[type(op)] for op in back])
            if turned < ahead or turned == ahead and [ast.dump(o) for o in reversed(operands)] < \
                    [ast.dump(o) for o in operands]:
                node.left, *node.comparators = reversed(operands)
                node.ops = back
        elif isinstance(node, ast.BoolOp) and all(self._reads_only(v) for v in node.values):
            node.values = sorted(node.values, key=lambda v: (key(v), ast.dump(v)))
        return node

    def _reads_only(self, node) -> bool:
        """Whether evaluating `node` calls nothing but builtins that only read (so that the order
        of `and`'s operands is the order of its checks, not of its effects)."""
        for n in ast.walk(node):
            if isinstance(n, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
                return False
            if isinstance(n, ast.Call) and not (isinstance(n.func, ast.Name) and n.func.id in _PURE
                                                and n.func.id not in self.bound):
                return False
        return True

    # -- calls ------------------------------------------------------------------------------

    def visit_Call(self, node):
        self.generic_visit(node)
        spelled = _operator_call(node, self.operators)
        if spelled is not None:
            return self._ordered(ast.copy_location(spelled, node))
        node.args = [e for a in node.args for e in (
            a.value.elts if isinstance(a, ast.Starred) and isinstance(a.value, (ast.Tuple, ast.List))
            else [a])]
        spelled = self._arithmetic(node)
        if spelled is not None:
            return ast.copy_location(spelled, node)
        for _ in range(4):                  # type(x).size(x, 0): x.size(0), then x.shape[0]
            again = self._method(node)
            if again is None:
                break
            node = ast.copy_location(again, node)
        if not isinstance(node, ast.Call):
            return node
        f = node.func
        if f.__class__ is ast.Attribute and f.attr == "size" and "size" not in self.methods \
                and _root(f.value) not in self.shape.aliases and not any(
                    isinstance(a, ast.Starred) for a in node.args):
            dims = node.args + [k.value for k in node.keywords if k.arg == "dim"]
            if len(dims) == len(node.args) + len(node.keywords) and len(dims) <= 1:
                shape = ast.Attribute(f.value, "shape", ast.Load())
                return ast.copy_location(ast.Subscript(shape, dims[0], ast.Load()) if dims else shape, node)
        mapped = node.args[0] if len(node.args) == 1 and not node.keywords else None
        if _callee(f) == "list" and isinstance(mapped, ast.Call) and _callee(mapped.func) == "map" \
                and len(mapped.args) == 2 and not mapped.keywords \
                and isinstance(mapped.args[0], ast.Lambda):
            fn, items = mapped.args
            a = fn.args
            if len(a.args) == 1 and not (a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg):
                loop = ast.comprehension(ast.Name(a.args[0].arg, ast.Store()), items, [], 0)
                return ast.copy_location(ast.ListComp(fn.body, [loop]), node)
        if len(node.keywords) > 1 and all(k.arg is not None for k in node.keywords):
            node.keywords = sorted(node.keywords, key=lambda k: (self.shape.key(k.value), k.arg))
        return node

    def _arithmetic(self, node):
        """`sum((a, b))` as `a + b` (`sum((a, -b))` as `a - b`), `math.prod((a, b))` as `a * b`
        (undoes A04's arithmetic through builtins); None for any other call."""
        f, args = node.func, node.args
        if node.keywords or len(args) != 1 or not isinstance(args[0], (ast.Tuple, ast.List)) \
                or len(args[0].elts) < 2 or any(isinstance(e, ast.Starred) for e in args[0].elts):
            return None
        aliases = self.shape.aliases
        if isinstance(f, ast.Name) and f.id == "sum" and "sum" not in self.bound:
            op = ast.Add
        elif isinstance(f, ast.Name) and aliases.get(f.id) == "math.prod" or isinstance(f, ast.Attribute) \
                and f.attr == "prod" and isinstance(f.value, ast.Name) and aliases.get(f.value.id) == "math":
            op = ast.Mult
        else:
            return None
        made, *rest = args[0].elts
        for e in rest:
            if op is ast.Add and isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
                made = ast.BinOp(made, ast.Sub(), e.operand)
            else:
                made = self._ordered(ast.BinOp(made, op(), e))
        return made

    def _method(self, node):
        """`x.m(...)` for `torch.Tensor.m(x, ...)`, `type(x).m(x, ...)`, `x.__class__.m(x, ...)`;
        None for any other call."""
        f = node.func
        if not (isinstance(f, ast.Attribute) and node.args and not isinstance(node.args[0], ast.Starred)):
            return None
        owner, me = f.value, node.args[0]
        tensor = isinstance(owner, ast.Attribute) and owner.attr == "Tensor" \
            and isinstance(owner.value, ast.Name) and owner.value.id == "torch"
        of = owner.args[0] if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) \
            and owner.func.id == "type" and "type" not in self.bound and len(owner.args) == 1 \
            and not owner.keywords else owner.value if isinstance(owner, ast.Attribute) \
            and owner.attr == "__class__" else None
        if tensor or of is not None and ast.dump(of) == ast.dump(me):
            return ast.Call(ast.Attribute(me, f.attr, ast.Load()), node.args[1:], node.keywords)
        return None

    def visit_Assign(self, node):
        self.generic_visit(node)
        left, right = node.targets[0], node.value
        step = _updated(node)
        if step is not None:
            return ast.copy_location(ast.AugAssign(ast.Name(left.id, ast.Store()), right.op, step), node)
        if self.split and len(node.targets) == 1 and isinstance(left, ast.Tuple) and isinstance(right, ast.Tuple) \
                and len(left.elts) == len(right.elts) \
                and all(isinstance(t, (ast.Name, ast.Attribute)) and _root(t) for t in left.elts) \
                and not any(isinstance(v, ast.Starred) for v in right.elts):
            read = {ast.unparse(n) for n in ast.walk(right) if isinstance(n, (ast.Name, ast.Attribute))}
            if not read & {ast.unparse(t) for t in left.elts}:
                return [ast.copy_location(ast.Assign([t], v), node)
                        for t, v in zip(left.elts, right.elts)]
        return node

    # -- loops that count, and loops that build a list, set or dict -----------------------------

    def _loops(self, block: list) -> list:
        """`while` loops that count, each with the statements that start its counter, as the
        `for` loops they are (`_counted`)."""
        out = []
        for stmt in block:
            made = self._counted(out, stmt) if out and isinstance(stmt, ast.While) else None
            out.append(stmt if made is None else ast.copy_location(made, stmt))
        return out

    def _counted(self, before: list, loop):
        """The `for` that `loop` (a `while` without else, break or continue) and the statements
        `before` it start are, taking those out of `before` (undoes A03's `for` as `while`):
        `i = a` then `while i < n: ...; i += s`: `for i in range(a, n, s): ...` (`range(n)` from 0
        by 1); `_i = 0` (after `_L = list(xs)`) then `while _i < len(_L): v = _L[_i]; ...; _i += 1`,
        `_i` and `_L` read nowhere else in it: `for v in xs: ...`. None when it is not such."""
        counter, test = _assigned(before[-1]), loop.test
        if counter is None or loop.orelse or _leaves_loop(loop.body) or not isinstance(test, ast.Compare) \
                or len(test.ops) != 1 or len(loop.body) < 2:
            return None
        stop = test.comparators[0] if isinstance(test.ops[0], ast.Lt) and _is_name(test.left, counter) \
            else test.left if isinstance(test.ops[0], ast.Gt) and _is_name(test.comparators[0], counter) else None
        step = _increment(loop.body[-1], counter)
        if stop is None or step is None:
            return None
        start, body, one = before[-1].value, loop.body[:-1], isinstance(step, ast.Constant) and step.value == 1
        first = body[0]
        items = stop.args[0] if isinstance(stop, ast.Call) and _callee(stop.func) == "len" \
            and isinstance(stop.func, ast.Name) and "len" not in self.bound and len(stop.args) == 1 \
            and not stop.keywords and isinstance(stop.args[0], ast.Name) else None
        if one and _is_zero(start) and items is not None and isinstance(first, ast.Assign) \
                and len(first.targets) == 1 and isinstance(first.value, ast.Subscript) \
                and _is_name(first.value.value, items.id) and _is_name(first.value.slice, counter) \
                and not {counter, items.id} & {n.id for s in body[1:] for n in ast.walk(s) if isinstance(n, ast.Name)}:
            before.pop()
            made = before[-1].value if before and _assigned(before[-1]) == items.id else None
            if isinstance(made, ast.Call) and isinstance(made.func, ast.Name) and made.func.id == "list" \
                    and "list" not in self.bound and len(made.args) == 1 and not made.keywords \
                    and not isinstance(made.args[0], ast.Starred):
                before.pop()
                items = made.args[0]
            return ast.For(first.targets[0], items, body[1:] or [ast.Pass()], [])
        if any(isinstance(n, ast.Name) and n.id == counter and not isinstance(n.ctx, ast.Load)
               for s in body for n in ast.walk(s)):
            return None
        before.pop()
        bounds = [stop] if one and _is_zero(start) else [start, stop] if one else [start, stop, step]
        return ast.For(ast.Name(counter, ast.Store()), ast.Call(ast.Name("range", ast.Load()), bounds, []),
                       body, [])

    # -- loops that build a list, set or dict --------------------------------------------------

    def _comprehensions(self, block: list) -> list:
        out = []
        for stmt in block:
            made = self._comprehension(out[-1], stmt) if out else None
            if made is None:
                out.append(stmt)
            else:
                out[-1] = ast.copy_location(ast.Assign([out[-1].targets[0]], made), out[-1])
        return out

    def _comprehension(self, first, loop):
        """The comprehension that `first` (`r = []`, `set()`, `{}`, `dict()`) and `loop` (nested
        `for`s and `if`s without else, one statement each, the innermost `r.append(e)` (or
        `r += [e]`, `r.extend([e])`), `r.add(e)` or `r[k] = v`) make together; None when they
        are not that."""
        if not (_assigned(first) and isinstance(loop, ast.For) and not loop.orelse):
            return None
        name, empty = _assigned(first), first.value
        kind = "list" if isinstance(empty, ast.List) and not empty.elts else \
            "dict" if isinstance(empty, ast.Dict) and not empty.keys else \
            empty.func.id if isinstance(empty, ast.Call) and isinstance(empty.func, ast.Name) \
            and empty.func.id in ("list", "set", "dict") and empty.func.id not in self.bound \
            and not empty.args and not empty.keywords else None
        if kind is None:
            return None
        generators, stmt = [], loop
        for _ in range(MAX_NESTING):
            if isinstance(stmt, ast.For) and not stmt.orelse:
                generators.append(ast.comprehension(stmt.target, stmt.iter, [], 0))
            elif isinstance(stmt, ast.If) and not stmt.orelse:
                generators[-1].ifs.append(stmt.test)
            else:
                break
            if len(stmt.body) != 1:
                return None
            stmt = stmt.body[0]
        else:
            return None
        call = stmt.value if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) else None
        if kind == "list":                  # `r += [e]` and `r.extend([e])` are `r.append(e)`
            extended = stmt.value if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add) \
                and isinstance(stmt.target, ast.Name) and stmt.target.id == name else \
                call.args[0] if call is not None and isinstance(call.func, ast.Attribute) \
                and isinstance(call.func.value, ast.Name) and call.func.value.id == name \
                and call.func.attr == "extend" and len(call.args) == 1 and not call.keywords else None
            if isinstance(extended, ast.List) and len(extended.elts) == 1 \
                    and not isinstance(extended.elts[0], ast.Starred):
                call = ast.Call(ast.Attribute(ast.Name(name, ast.Load()), "append", ast.Load()),
                                extended.elts, [])
        if call is not None and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) \
                and call.func.value.id == name and len(call.args) == 1 and not call.keywords \
                and not isinstance(call.args[0], ast.Starred) \
                and call.func.attr == {"list": "append", "set": "add"}.get(kind):
            made = (ast.ListComp if kind == "list" else ast.SetComp)(call.args[0], generators)
        elif kind == "dict" and isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
                and isinstance(stmt.targets[0], ast.Subscript) and isinstance(stmt.targets[0].value, ast.Name) \
                and stmt.targets[0].value.id == name and not isinstance(stmt.targets[0].slice, ast.Slice):
            made = ast.DictComp(stmt.targets[0].slice, stmt.value, generators)
        else:
            return None
        if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(made)):
            return None                     # the loop reads what it builds
        return made


_COMMUTATIVE = (ast.Add, ast.Mult, ast.BitAnd, ast.BitOr, ast.BitXor)
_FLIP = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE, ast.Eq: ast.Eq,
         ast.NotEq: ast.NotEq, ast.Is: ast.Is, ast.IsNot: ast.IsNot}
_RANK = {op: i for i, op in enumerate((ast.Lt, ast.LtE, ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.Gt, ast.GtE))}
MAX_NESTING = 16                # loops and ifs in one loop made a comprehension


def _is_name(node, name) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _is_zero(node) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value == 0


def _increment(stmt, name):
    """What `stmt` adds to `name` (`name += s`, `name = name + s`), or None."""
    if isinstance(stmt, ast.AugAssign) and _is_name(stmt.target, name) and isinstance(stmt.op, ast.Add):
        return stmt.value
    if _assigned(stmt) == name and isinstance(stmt.value, ast.BinOp) and isinstance(stmt.value.op, ast.Add):
        left, right = stmt.value.left, stmt.value.right
        return right if _is_name(left, name) else left if _is_name(right, name) else None
    return None


def _updated(node):
    """What `node`, an assignment `a = a <op> b` (or `a = b <op> a` where the operands' order is
    made one), gives `a` to combine with: `b`, so that it is `a <op>= b` (undoes A03's `a += b`
    written `a = a + b`); None otherwise."""
    name, value = _assigned(node), node.value
    if name is None or not isinstance(value, ast.BinOp):
        return None
    if _is_name(value.left, name):
        return value.right
    ordered = isinstance(value.op, _COMMUTATIVE) and not (isinstance(value.op, ast.Add) and (
        _sequence(value.left) or _sequence(value.right)))
    return value.left if ordered and _is_name(value.right, name) else None


def _sequence(node) -> bool:
    """A string, list or tuple written out: `+` with it concatenates (its order counts)."""
    return isinstance(node, (ast.List, ast.Tuple, ast.JoinedStr, ast.ListComp)) \
        or isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))


class _Shape:
    """A key of an expression that is the same wherever the file's own names differ: what sorts
    commutative operands, comparisons and keyword arguments into one order. Names the file
    defines, its own attributes, numbers and strings are placeholders as the tokens make them
    ("V", "N", "S"), an import is its qualified name, an API's attribute its name. Two
    expressions with the same key become the same tokens, so their order does not matter."""

    def __init__(self, names, bound):
        self.defined, self.attrs, self.aliases = names[:3]
        self.bound = bound
        self.memo: dict = {}                # id(node) -> (node, key): the node held, so no id is reused

    def key(self, node):
        hit = self.memo.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        if isinstance(node, ast.Name):
            name = node.id
            found = ("Name", self.aliases[name] if name in self.aliases else
                     "V" if name in self.defined or name not in _BUILTINS else name)
        elif isinstance(node, ast.Constant):
            v = node.value
            found = ("~Constant", "S" if isinstance(v, (str, bytes)) else repr(v)
                     if v is None or isinstance(v, bool) or v is ... else "N")
        elif isinstance(node, ast.Attribute):
            root, own = self.key(node.value), node.attr in self.attrs
            found = root if own and root == ("Name", "V") else \
                ("Attribute", root, ("V" if own else node.attr,))     # `self.w`, `_G.x`: one name
        else:
            parts = [type(node).__name__]
            for field, value in ast.iter_fields(node):
                if field == "ctx":
                    continue
                if isinstance(value, ast.AST):
                    parts.append(self.key(value))
                elif isinstance(value, list):
                    parts.append(("list", *(self.key(v) if isinstance(v, ast.AST) else ("", repr(v))
                                            for v in value)))
                else:
                    parts.append(("", "V" if isinstance(value, str) else repr(value)))
            found = tuple(parts)
        self.memo[id(node)] = (node, found)
        return found


def _returned_parameter(fn):
    """The index of the positional parameter that `fn` (a def or a lambda) only returns, and its
    name; None when it does anything else."""
    positional = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    holds = {p: p for p in positional}      # a name -> the parameter it holds (y = x; return y)
    if isinstance(fn, ast.Lambda):
        value = fn.body
    else:
        decorators = [ast.unparse(d) for d in fn.decorator_list]
        if decorators not in ([], ["staticmethod"]):
            return None
        body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
                and not isinstance(s, ast.Pass)]
        for stmt in body[:-1]:
            if not (_assigned(stmt) and isinstance(stmt.value, ast.Name) and stmt.value.id in holds):
                return None
            holds[_assigned(stmt)] = holds[stmt.value.id]
        if not body or not isinstance(body[-1], ast.Return):
            return None
        value = body[-1].value
    if isinstance(value, ast.Name) and value.id in holds:
        return positional.index(holds[value.id]), holds[value.id]
    return None


def _assigned(node):
    """The name `node` assigns, where it is `name = ...`; None otherwise."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    return None


def _identities(nodes) -> tuple[dict, dict, set]:
    """The file's identity functions, called by name ({name: (index of the parameter returned,
    its name)}), and its identity methods, called on an object (`self._i(x)`: one argument
    less than the def, `self` being passed; a staticmethod's as it is), and the names the file
    binds. A lambda assigned to a name is a function. A name also bound to anything else is
    neither."""
    functions, methods, bad = {}, {}, set()
    stores, lambda_stores = {}, {}
    in_class = {id(f) for c in nodes if isinstance(c, ast.ClassDef) for f in c.body}
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            hit = None if isinstance(node, ast.AsyncFunctionDef) else _returned_parameter(node)
            table = methods if id(node) in in_class else functions
            if hit and id(node) in in_class and not node.decorator_list:
                hit = (hit[0] - 1, hit[1]) if hit[0] > 0 else None       # self is passed
            if hit is None or table.setdefault(node.name, hit) != hit:
                bad.add(node.name)
        elif _assigned(node) and isinstance(node.value, ast.Lambda) and _returned_parameter(node.value):
            name = _assigned(node)
            lambda_stores[name] = lambda_stores.get(name, 0) + 1
            if functions.setdefault(name, _returned_parameter(node.value)) != _returned_parameter(node.value):
                bad.add(name)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            stores[node.id] = stores.get(node.id, 0) + 1
        elif isinstance(node, ast.arg):
            bad.add(node.arg)
        elif isinstance(node, ast.ClassDef):
            bad.add(node.name)
        elif isinstance(node, ast.alias):
            bad.add((node.asname or node.name).split(".")[0])
    bad |= {name for name, n in stores.items() if n > lambda_stores.get(name, 0)}
    return ({k: v for k, v in functions.items() if k not in bad},
            {k: v for k, v in methods.items() if k not in bad},
            bad | set(functions) | set(stores))     # names bound in the file (getattr: not the builtin)


def _replacement(call, identities):
    """What _Inline replaces `call` with (its argument, an attribute), or None."""
    func, hit = call.func, None
    if isinstance(func, ast.Lambda):
        hit = _returned_parameter(func)
    elif isinstance(func, ast.Name):
        hit = identities[0].get(func.id)
    elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):    # self._i(x)
        hit = identities[1].get(func.attr)
    if hit and not any(isinstance(a, ast.Starred) for a in call.args) \
            and not any(k.arg is None for k in call.keywords):
        index, name = hit
        if index < len(call.args):
            return call.args[index]
        return next((k.value for k in call.keywords if k.arg == name), None)
    if isinstance(func, ast.Name) and func.id == "getattr" and len(call.args) == 2 and not call.keywords \
            and isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str) \
            and call.args[1].value.isidentifier() and not keyword.iskeyword(call.args[1].value) \
            and "getattr" not in identities[2]:
        return ast.Attribute(call.args[0], call.args[1].value, ast.Load())
    return None


class _Inline(ast.NodeTransformer):
    """f(x) is x where f only returns its parameter (and so is `(lambda x: x)(x)`); getattr(x,
    "name") is x.name."""

    def __init__(self, identities: tuple):
        self.identities = identities

    def visit_Call(self, node):
        self.generic_visit(node)
        return _replacement(node, self.identities) or node


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _scope_nodes(body: list) -> list:
    """The nodes of a scope's statements, less those inside the functions, classes and lambdas
    they define (the def itself is in: it binds its name)."""
    out, stack = [], list(reversed(body))
    while stack:
        node = stack.pop()
        out.append(node)
        if not isinstance(node, _SCOPES):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))
    return out


def _holders(body: list, parameters: set, nodes=None) -> set:
    """The names of a scope that only hold other names as attributes (`_s = SimpleNamespace()`,
    `_f = _Frame(x=x)`, then only `_s.x` read and written): bound once, by an assignment of a
    call with no positional argument, and otherwise only the root of an attribute that it holds
    (a keyword of that call, or one stored on it: `_t = x.contiguous()`, then `_t.clone()`, holds
    nothing). nodes: where the names are used (default: the scope's own nodes)."""
    nodes = _scope_nodes(body) if nodes is None else nodes
    made, bound, bare, rooted, held, read = {}, {}, {}, {}, {}, {}
    for n in nodes:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                and isinstance(n.value, ast.Call) and not n.value.args \
                and all(k.arg is not None for k in n.value.keywords):
            made[n.targets[0].id] = made.get(n.targets[0].id, 0) + 1
            held.setdefault(n.targets[0].id, set()).update(k.arg for k in n.value.keywords)
        if isinstance(n, ast.Name):
            table = bare if isinstance(n.ctx, ast.Load) else bound
            table[n.id] = table.get(n.id, 0) + 1
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
            rooted[n.value.id] = rooted.get(n.value.id, 0) + 1
            table = read if isinstance(n.ctx, ast.Load) else held
            table.setdefault(n.value.id, set()).add(n.attr)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound[n.name] = 2
        elif isinstance(n, ast.alias):
            bound[n.asname or n.name.split(".")[0]] = 2
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            bound.update((name, 2) for name in n.names)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound[n.name] = 2
    return {name for name, count in made.items() if count == 1 and bound.get(name) == 1
            and name not in parameters and bare.get(name, 0) == rooted.get(name, 0)
            and read.get(name, set()) <= held.get(name, set())}


class _Unhold(ast.NodeTransformer):
    """Names moved onto a holder object moved back: in each scope whose `_holders` are known,
    `_s.x` is `x`, `_s = Ns(a=e)` is `a = e`, and `x = x` is gone; a module's holder (`_G =
    _State()`, then `_G.x = x` in every function) in the whole file."""

    def __init__(self, tree):
        self.attrs, self.made = set(), set()
        everywhere = list(ast.walk(tree))
        scopes = [(n.body, {a.arg for a in [*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs,
                                             *(x for x in (n.args.vararg, n.args.kwarg) if x)]}, None)
                  for n in everywhere if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        scopes.append((tree.body, {n.arg for n in everywhere if isinstance(n, ast.arg)}, everywhere))
        for body, parameters, nodes in scopes:
            held = _holders(body, parameters, nodes)        # the module's: used by every function
            if nodes is not None:
                held &= {_assigned(n) for n in tree.body}
            if not held:
                continue
            for n in _scope_nodes(body) if nodes is None else nodes:
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in held:
                    self.attrs.add(id(n))
                elif isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) \
                        and n.targets[0].id in held:
                    self.made.add(id(n))

    def visit_Attribute(self, node):
        if id(node) in self.attrs:
            return ast.copy_location(ast.Name(node.attr, node.ctx), node)
        return self.generic_visit(node)

    def visit_Assign(self, node):
        if id(node) in self.made:
            return [ast.copy_location(ast.Assign([ast.Name(k.arg, ast.Store())], self.visit(k.value)), node)
                    for k in node.value.keywords
                    if not (isinstance(k.value, ast.Name) and k.value.id == k.arg)] or None
        node = self.generic_visit(node)
        if self.attrs and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Name) and node.targets[0].id == node.value.id:
            return None                     # `_s.x = x`, now `x = x`
        return node


def _inline_temporaries(tree) -> bool:
    """Each name bound once and read once in its scope (a function's body, the module's), read by
    the statement right after its binding, or by temporaries inlined there, is its value there
    (undoes A02's three-address code and A03's return through a temporary): `_t1 = g(x); _t2 =
    f(_t1); y = h(_t2)` is `y = h(f(g(x)))`, `_r = e; return _r` is `return e`. A fingerprint's
    approximation: the value's calls may move past what that statement evaluates first. Returns
    whether it inlined any."""
    values = {}                             # id(the name read) -> the value that replaces it
    scopes = [(tree.body, [])] + [(n.body, [*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs,
                                            *(a for a in (n.args.vararg, n.args.kwarg) if a)])
                                  for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for body, parameters in scopes:
        nodes = _scope_nodes(body)
        binds, reads = {a.arg: 1 for a in parameters}, {}
        for n in nodes:
            for name in _BINDS.get(type(n), lambda n: ())(n):
                binds[name] = binds.get(name, 0) + 1
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                reads[n.id] = None if n.id in reads else n
        once = {name: n for name, n in reads.items() if n is not None and binds.get(name) == 1}
        if once:
            for block in [body] + [b for n in nodes if not isinstance(n, _SCOPES)
                                   for b in _blocks(n)]:
                _inline_block(block, once, values)
    _Substitute(values).visit(tree)
    return bool(values)


def _blocks(node) -> list:
    """The statement lists `node` holds (a loop's body and else, a handler's body, ...)."""
    return [b for b in (getattr(node, f, None) for f in ("body", "orelse", "finalbody"))
            if isinstance(b, list) and b and isinstance(b[0], ast.stmt)]


def _inline_block(block: list, once: dict, values: dict) -> None:
    """_inline_temporaries in one block, from its end: `block` less the bindings inlined, their
    values recorded in `values` under the name each replaces."""
    where = {id(n): i for i, stmt in enumerate(block) for n in _plain_reads(stmt) if once.get(n.id) is n}
    kept, into = [], None                   # into: the index of the statement they go into
    for i in range(len(block) - 1, -1, -1):
        name, stmt = _assigned(block[i]), block[i]
        read = once.get(name) if name else None
        if into is not None and read is not None and i < where.get(id(read), -1) <= into \
                and into - i <= MAX_CHAIN and (isinstance(stmt.value, _HOISTED) or _returns(block[into], name)):
            values[id(read)] = stmt.value
        else:
            kept.append(stmt)
            into = i
    block[:] = kept[::-1]


def _returns(stmt, name) -> bool:
    return isinstance(stmt, ast.Return) and _is_name(stmt.value, name)


def _plain_reads(stmt):
    """The names `stmt` itself reads, once each time it runs: not those in the statements it
    holds, in a `while` test, a lambda, a comprehension, or what `and`/`or` and `a if c else b`
    may skip (nor in a definition)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return
    todo = [v for f, v in ast.iter_fields(stmt) if f not in ("body", "orelse", "finalbody", "handlers", "cases")
            and not (f == "test" and isinstance(stmt, ast.While))]
    while todo:
        n = todo.pop()
        if isinstance(n, list):
            todo += n
        elif isinstance(n, ast.Name):
            if isinstance(n.ctx, ast.Load):
                yield n
        elif isinstance(n, ast.BoolOp):
            todo.append(n.values[0])
        elif isinstance(n, ast.IfExp):
            todo.append(n.test)
        elif isinstance(n, ast.AST) and not isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp,
                                                            ast.DictComp, ast.GeneratorExp)):
            todo += list(ast.iter_child_nodes(n))


class _Substitute(ast.NodeTransformer):
    """Each name read that _inline_temporaries inlines, replaced by its value."""

    def __init__(self, values: dict):
        self.values = values

    def visit_Name(self, node):
        value = self.values.get(id(node))
        return node if value is None else self.visit(value)


def _never_read(nodes) -> set:
    """Names the file stores and never reads (nor declares global or nonlocal)."""
    loaded, stored, declared = set(), set(), set()
    for n in nodes:
        if isinstance(n, ast.Name):
            (loaded if isinstance(n.ctx, ast.Load) else stored).add(n.id)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            declared |= set(n.names)
    return stored - loaded - declared


@dataclass(frozen=True)
class _Scope:
    dead: set           # names the file stores and never reads
    bound: set          # names the file binds (a builtin it redefines is not the builtin)
    attributes: set     # attribute names the file reads (`self.x`: a class's x is read)
    imported: set       # names the file binds by import only (modules, their functions)
    noops: set          # the file's functions and methods that do nothing (`def _pad(*a): pass`)
    loaded: set         # names the file reads
    sinks: set          # names only ever written into (`_t.append(0)`, `_c[0] += 1`): padding
    constants: dict     # names bound once, to a value written out (`_NAP = 0`): {name: the value}


def _scope(nodes) -> _Scope:
    return _Scope(_never_read(nodes), _bound(nodes), _read_attributes(nodes), _imported(nodes), _noops(nodes),
                  {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)},
                  _sinks(nodes), _constants(nodes))


def _constants(nodes) -> dict:
    """{name: value} of the names the file binds once, by `name = value` where the value is
    written out or folds from such (`_NAP = 0`, `_OFF = not 1`, `_B = _A * 2`): a padder's
    `time.sleep(_NAP)` is `time.sleep(0)`, and `if _OFF:` is `if False:`."""
    counts: dict = {}
    for n in nodes:
        binds = _BINDS.get(type(n))
        if binds is None:
            continue
        for name in binds(n):
            counts[name] = counts.get(name, 0) + 1
    single = [n for n in nodes if _assigned(n) and counts.get(n.targets[0].id) == 1]
    values: dict = {}
    for _ in range(4):                      # _B = _A * 2 after _A = 1
        before = len(values)
        for n in single:
            name = n.targets[0].id
            if name not in values:
                known, value = _value(n.value, values)
                if known:
                    values[name] = value
        if len(values) == before:
            break
    return values


_BINDS = {      # what each kind of node binds (a global or nonlocal declaration: twice, not once)
    ast.Name: lambda n: () if isinstance(n.ctx, ast.Load) else (n.id,), ast.arg: lambda n: (n.arg,),
    ast.FunctionDef: lambda n: (n.name,), ast.AsyncFunctionDef: lambda n: (n.name,),
    ast.ClassDef: lambda n: (n.name,), ast.alias: lambda n: ((n.asname or n.name).split(".")[0],),
    ast.Global: lambda n: n.names * 2, ast.Nonlocal: lambda n: n.names * 2,
    ast.ExceptHandler: lambda n: (n.name,) if n.name else (), ast.MatchAs: lambda n: (n.name,) if n.name else (),
    ast.MatchStar: lambda n: (n.name,) if n.name else (), ast.MatchMapping: lambda n: (n.rest,) if n.rest else ()}
_FOLD = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
         ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}
_UNFOLD = {ast.USub: lambda a: -a, ast.UAdd: lambda a: +a, ast.Not: lambda a: not a, ast.Invert: lambda a: ~a}


def _value(node, constants, depth=0):
    """(True, value) of an expression written out (a constant, a name of `constants`, numbers
    combined by + - * / // %, a tuple of such), else (False, None). Bounded: numbers only are
    combined, none larger than 2**64, at most MAX_FOLD deep."""
    if depth > MAX_FOLD:
        return False, None
    if isinstance(node, ast.Constant):
        return True, node.value
    if isinstance(node, ast.Name):
        return (True, constants[node.id]) if node.id in constants else (False, None)
    if isinstance(node, ast.Tuple):
        parts = [_value(e, constants, depth + 1) for e in node.elts]
        return (True, tuple(v for _, v in parts)) if all(k for k, _ in parts) else (False, None)
    numbers = (bool, int, float)
    try:
        if isinstance(node, ast.UnaryOp):
            known, v = _value(node.operand, constants, depth + 1)
            if known and (isinstance(v, numbers) and abs(v) < 1 << 64 or isinstance(node.op, ast.Not)):
                return True, _UNFOLD[type(node.op)](v)
        elif isinstance(node, ast.BinOp) and type(node.op) in _FOLD:
            (k1, a), (k2, b) = _value(node.left, constants, depth + 1), _value(node.right, constants, depth + 1)
            if k1 and k2 and isinstance(a, numbers) and isinstance(b, numbers) \
                    and abs(a) < 1 << 64 and abs(b) < 1 << 64:     # `0x...` of a megabyte: not multiplied
                v = _FOLD[type(node.op)](a, b)
                if abs(v) < 1 << 64:
                    return True, v
    except (ArithmeticError, ValueError, TypeError):
        pass
    return False, None


def _sink_of(stmt):
    """The name that `stmt` only writes into, or None: a method call on it whose value is
    discarded (`_t.append(x)`), an item or attribute of it stored or updated (`_c[0] += 1`)."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
            and isinstance(stmt.value.func, ast.Attribute) and isinstance(stmt.value.func.value, ast.Name):
        return stmt.value.func.value.id
    targets = [stmt.target] if isinstance(stmt, ast.AugAssign) else \
        stmt.targets if isinstance(stmt, ast.Assign) else []
    if len(targets) == 1 and isinstance(targets[0], (ast.Subscript, ast.Attribute)) \
            and isinstance(targets[0].value, ast.Name):
        return targets[0].value.id
    return None


def _own_loads(stmt) -> set:
    """Names `stmt` reads itself, not in the statements it holds (a loop's body)."""
    found = set()
    for _, value in ast.iter_fields(stmt):
        for part in value if isinstance(value, list) else [value]:
            if isinstance(part, ast.AST) and not isinstance(part, (ast.stmt, ast.excepthandler)):
                found |= {n.id for n in ast.walk(part)
                          if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return found


def _sinks(nodes) -> set:
    """Names bound by a plain assignment that the file reads only to write into them again, to
    an object it made from nothing (`[]`, `set()`): one that a call returns (`_t =
    x.untyped_storage()`, then `_t.resize_(0)`) may be shared."""
    assigned = {t.id for n in nodes if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Name)}
    assigned -= {t.id for n in nodes if isinstance(n, ast.Assign) and any(
        isinstance(c, ast.Call) and not (isinstance(c.func, ast.Name) and c.func.id in _PURE)
        for c in ast.walk(n.value)) for t in n.targets if isinstance(t, ast.Name)}
    read = set()
    for stmt in (n for n in nodes if isinstance(n, ast.stmt)):
        read |= _own_loads(stmt) - {_sink_of(stmt)}
    for handler in (n for n in nodes if isinstance(n, ast.excepthandler)):
        read |= _own_loads(handler)
    return assigned - read


def _noops(nodes) -> set:
    """Names of the file's functions whose body does nothing (pass, a docstring, `return`, `return
    None`), less names it also binds to anything else."""
    defs = [n for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    empty = {f.name for f in defs if not f.decorator_list and all(
        isinstance(s, ast.Pass) or isinstance(s, (ast.Expr, ast.Return))
        and isinstance(s.value, (ast.Constant, type(None))) for s in f.body)}
    other = {f.name for f in defs if f.name not in empty}
    other |= _bound([n for n in nodes if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))])
    return {name for name in empty if name not in other and not name.startswith("__")}


def _bound(nodes) -> set:
    """Every name the file binds: definitions, parameters, stores, imports."""
    out = set()
    for n in nodes:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            out.add(n.id)
        elif isinstance(n, ast.alias):
            out.add((n.asname or n.name).split(".")[0])
    return out


def _imported(nodes) -> set:
    imported = {(n.asname or n.name).split(".")[0] for n in nodes if isinstance(n, ast.alias)}
    return imported - _bound([n for n in nodes if not isinstance(n, ast.alias)])


def _read_attributes(nodes) -> set:
    return {n.attr for n in nodes if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)}


_COMPARE = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Is: lambda a, b: a is b,
            ast.IsNot: lambda a, b: a is not b}
_SIMPLE = (bool, int, float, str, type(None))


def _constant(node, scope=None):
    """(True, its truth) for a constant condition (`False`, `0`, `not True`, `1 == 1`, `x or
    True` where reading x does nothing, a name bound once to such: `_OFF = 0`, `if _OFF:`),
    else (False, None)."""
    constants = scope.constants if scope is not None else {}
    if isinstance(node, (ast.Constant, ast.Name, ast.BinOp)):
        known, value = _value(node, constants)
        return (True, bool(value)) if known else (False, None)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        known, value = _constant(node.operand, scope)
        return known, None if value is None else not value
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        (k1, a), (k2, b) = _value(node.left, constants), _value(node.comparators[0], constants)
        if k1 and k2 and type(a) in _SIMPLE and type(b) in _SIMPLE:
            return True, _COMPARE[type(node.ops[0])](a, b)
    if isinstance(node, ast.BoolOp):
        values = [_constant(v, scope) for v in node.values]
        decisive = isinstance(node.op, ast.Or)          # one True decides an `or`, one False an `and`
        if all(k for k, _ in values):
            return True, any(v for _, v in values) if decisive else all(v for _, v in values)
        if any(k and v == decisive for k, v in values) and all(_inert(v, None) for v in node.values):
            return True, decisive
    return False, None


# A discarded call of one of these (or of a name starting with is_, get_ or has_) only asks
# something: `torch.is_tensor(x)`, `dist.get_rank(group)`, `x.size(0)`.
_QUERIES = {"size", "dim", "numel", "nelement", "ndimension", "stride", "element_size", "equal",
            "allclose", "isinstance", "issubclass", "type"}


def _callee(func) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _root(node):
    """The name an expression starts from: `torch` of `torch.cuda.current_stream().synchronize`."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _literal(node, scope=None) -> bool:
    """A value written out: a constant, -1, a name bound once to such (scope.constants:
    `_NAP = 0`), numbers combined (`2 * _NAP`), a tuple, list, set or dict of such."""
    if isinstance(node, (ast.Constant, ast.Name, ast.BinOp)):
        return _value(node, scope.constants if scope is not None else {})[0]
    if isinstance(node, ast.UnaryOp):
        return _literal(node.operand, scope)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(_literal(e, scope) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _literal(k, scope) and _literal(v, scope) for k, v in zip(node.keys, node.values))
    return False


def _inert(node, scope) -> bool:
    """Whether evaluating `node` and discarding its value is padding: it reads names and
    attributes, computes with them, or calls (a) a builtin that only reads (`len`, `print`:
    _PURE) with such arguments, (b) a function of an imported module with only written-out
    arguments or none (`torch.is_grad_enabled()`, `os.getpid()`, `dist.barrier()`), or (c) a
    query (`torch.is_tensor(x)`, `dist.get_rank(group)`, `x.size(0)`: _QUERIES), or a function
    of the file's own that does nothing (`_pad(x)`, `self._pad()`), with such arguments. What
    (b) drops may act (a barrier), but with nothing of the file's own passed in it reads the
    same in every file: the algorithm is in the calls that take the file's data, and the copy
    and its original lose the same statements. A method of the file's own values
    (`t.add_(1)`, `work.wait()`, `loss.backward()`) may change them: kept, queries aside.
    scope None: nothing is known of the file's names (no call is taken to be inert)."""
    if isinstance(node, (ast.Constant, ast.Name, ast.Lambda)):
        return True
    if isinstance(node, ast.Attribute):
        return _inert(node.value, scope)
    if isinstance(node, (ast.Subscript, ast.Slice, ast.Starred, ast.FormattedValue, ast.JoinedStr, ast.Tuple,
                         ast.List, ast.Set, ast.Dict, ast.UnaryOp, ast.BinOp, ast.BoolOp, ast.Compare,
                         ast.IfExp)):
        return all(_inert(c, scope) for c in ast.iter_child_nodes(node)
                   if not isinstance(c, (ast.expr_context, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)))
    if isinstance(node, ast.NamedExpr):
        return scope is not None and node.target.id in scope.dead and _inert(node.value, scope)
    if not isinstance(node, ast.Call) or not _inert(node.func, scope):
        return False
    arguments = [*node.args, *(k.value for k in node.keywords)]
    if scope is None:
        return False
    if all(_literal(a, scope) for a in arguments) and all(k.arg is not None for k in node.keywords) \
            and _root(node.func) in scope.imported:
        return True                                                     # (b)
    name = _callee(node.func)
    if name in scope.noops:
        return all(_inert(a, scope) for a in arguments)                 # the file's own no-op
    own = name in scope.bound
    query = name in _QUERIES or name.startswith(("is_", "get_", "has_"))
    builtin = isinstance(node.func, ast.Name) and name in _PURE
    if own or not (query or builtin):
        return False
    return all(_inert(a, scope) for a in arguments)                     # (a), (c)


def _stores_to(targets, dead) -> bool:
    """Whether every name `targets` store to is one nothing reads (`_a, *_b = x`)."""
    for t in targets:
        if isinstance(t, ast.Starred):
            t = t.value
        if isinstance(t, (ast.Tuple, ast.List)):
            if not _stores_to(t.elts, dead):
                return False
        elif not (isinstance(t, ast.Name) and t.id in dead):
            return False
    return bool(targets)


def _leaves_loop(block) -> bool:
    """Whether `block` breaks or continues the loop it is in (not one nested in it)."""
    for stmt in block:
        for n in _walk_loop(stmt):
            if isinstance(n, (ast.Break, ast.Continue)):
                return True
    return False


def _walk_loop(node):
    yield node
    if isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef, ast.Lambda)):
        for part in node.orelse if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) else ():
            yield from _walk_loop(part)
        return
    for child in ast.iter_child_nodes(node):
        yield from _walk_loop(child)


def _wrapper(stmt, scope) -> bool:
    """A block that runs its body once, as it is: `for _ in range(1):`, `for _ in (0,):`, `with
    nullcontext():`, `try: ... finally: pass` (`if True:` is a constant condition)."""
    if isinstance(stmt, ast.For) and not stmt.orelse and _stores_to([stmt.target], scope.dead) \
            and not _leaves_loop(stmt.body):
        it = stmt.iter
        once = isinstance(it, (ast.Tuple, ast.List)) and len(it.elts) == 1 and _literal(it.elts[0], scope)
        once = once or (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                        and "range" not in scope.bound and not it.keywords and len(it.args) == 1
                        and _value(it.args[0], scope.constants) == (True, 1))
        return once
    if isinstance(stmt, ast.With):
        return all(i.optional_vars is None and isinstance(i.context_expr, ast.Call)
                   and not i.context_expr.args and not i.context_expr.keywords
                   and _callee(i.context_expr.func) == "nullcontext" for i in stmt.items)
    return False


_ENDS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def _live_block(block: list, gone: set, scope: _Scope, in_function: bool, keep_one: bool) -> list:
    """The statements of `block` that may run and change what the program reads (one `pass`
    where a body must keep one): what follows a return or raise never runs."""
    out = []
    for stmt in block:
        out += _live(stmt, gone, scope, in_function)
        if out and isinstance(out[-1], _ENDS):
            break
    return out or ([ast.Pass()] if keep_one else [])


def _live(stmt, gone: set, scope: _Scope, in_function: bool) -> list:
    if isinstance(stmt, (ast.If, ast.While)):
        known, value = _constant(stmt.test, scope)
        if known and not value:                             # if False: / while 0:
            return _live_block(stmt.orelse, gone, scope, in_function, False)
        if known and isinstance(stmt, ast.If):              # if True:
            return _live_block(stmt.body, gone, scope, in_function, False)
    if _wrapper(stmt, scope):                               # for _ in range(1):, with nullcontext():
        return _live_block(stmt.body, gone, scope, in_function, False)
    if isinstance(stmt, ast.Pass) or isinstance(stmt, ast.Expr) and _inert(stmt.value, scope):
        return []                                           # docstrings, bare values, queries
    if isinstance(stmt, ast.Assert) and _inert(stmt.test, scope) and _inert(stmt.msg or ast.Constant(None), scope):
        return []                                           # an assert only reads: it checks, does nothing
    if _sink_of(stmt) in scope.sinks and _writes_only(stmt, scope):
        return []                                           # `_t.append(0)`: into what nothing reads
    if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) and t.id in scope.sinks
                                            for t in stmt.targets) and _inert(stmt.value, scope):
        return []                                           # `_t = []`, the sink itself
    if in_function and isinstance(stmt, (ast.Import, ast.ImportFrom)) and not any(
            (a.asname or a.name).split(".")[0] in scope.loaded for a in stmt.names):
        return []                                           # an import nothing reads
    if in_function and isinstance(stmt, ast.AnnAssign) and stmt.value is None:
        return []                                           # `x: object`: binds nothing
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in gone:
        return []                                           # an identity function, inlined
    if _assigned(stmt) in gone and isinstance(stmt.value, ast.Lambda):
        return []
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Delete)):
        targets = stmt.targets if isinstance(stmt, (ast.Assign, ast.Delete)) else [stmt.target]
        value = getattr(stmt, "value", None)
        unread = scope.dead if in_function is not None else scope.dead - scope.attributes
        if _stores_to(targets, unread) and (in_function or isinstance(stmt, ast.Delete)
                                             or (value is None and in_function is False)
                                             or value is not None and _inert(value, scope)):
            return []       # a store nothing reads (outside a function, of a value that calls nothing;
                            # a class's `name: type` without one is a field)
    inner = True if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) \
        else None if isinstance(stmt, ast.ClassDef) else in_function      # None: a class's body
    for field in ("body", "orelse", "finalbody"):
        block = getattr(stmt, field, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            setattr(stmt, field, _live_block(block, gone, scope, inner, keep_one=field == "body"))
    for part in [*getattr(stmt, "handlers", ()), *getattr(stmt, "cases", ())]:
        part.body = _live_block(part.body, gone, scope, inner, keep_one=True)
    if isinstance(stmt, ast.Try) and not stmt.handlers and not stmt.orelse and not stmt.finalbody:
        return [s for s in stmt.body if not isinstance(s, ast.Pass)]     # try: ... finally: pass
    if _empty(stmt, scope):
        return []           # `if x is None: pass`, `for _ in (): pass`, `try: pass`, `with f(): pass`
    return [stmt]


def _writes_only(stmt, scope) -> bool:
    """Whether what `stmt` puts into its sink only reads (`_t.append(x)`, not `_t.append(x.add_(1))`)."""
    if isinstance(stmt, ast.Expr):
        call = stmt.value
        return all(_inert(a, scope) for a in [*call.args, *(k.value for k in call.keywords)])
    parts = [stmt.value, *(getattr(t, "slice", None) for t in
                           ([stmt.target] if isinstance(stmt, ast.AugAssign) else stmt.targets))]
    return all(p is None or _inert(p, scope) for p in parts)


def _empty(stmt, scope) -> bool:
    """A block statement that does nothing: bodies of `pass` alone, on a test, iterable or
    context that only reads; a `try` whose body does nothing (it raises nothing to handle)."""
    def nothing(block):
        return all(isinstance(s, ast.Pass) for s in block)
    if isinstance(stmt, ast.Try):
        return nothing(stmt.body) and nothing(stmt.orelse) and nothing(stmt.finalbody)
    if isinstance(stmt, (ast.If, ast.While)):
        return nothing(stmt.body) and nothing(stmt.orelse) and _inert(stmt.test, scope)
    if isinstance(stmt, ast.For):
        return nothing(stmt.body) and nothing(stmt.orelse) and _inert(stmt.iter, scope)
    if isinstance(stmt, ast.With):
        return nothing(stmt.body) and all(i.optional_vars is None and _inert(i.context_expr, scope)
                                          for i in stmt.items)
    return False


# ---- tokens --------------------------------------------------------------------------------------

def _names(tree, nodes=None):
    """(names the file defines, attribute names it defines, {alias: qualified name}, names it
    stores but never reads), from its ast; empty when it does not parse (None: its names then
    all become placeholders)."""
    if tree is None:
        return set(), set(), {}, set()
    defined, attrs, aliases, classes, loaded, stored = set(), set(), {}, [], set(), set()
    for node in ast.walk(tree) if nodes is None else nodes:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            stored.add(node.id)
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            loaded.add(node.id if isinstance(node, ast.Name) else node.attr)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
            if isinstance(node, ast.ClassDef):
                classes.append(node)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            defined.add(node.id)
        elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            attrs.add(node.attr)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            defined.add(node.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                aliases[a.asname or top] = a.name if a.asname else top
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""       # relative: the sibling module's own name
            for a in node.names:
                aliases[a.asname or a.name] = f"{module}.{a.name}".lstrip(".")
    for cls in classes:
        for stmt in cls.body:               # methods and class attributes: reached as self.name
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                attrs.add(stmt.name)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                attrs |= {t.id for t in targets if isinstance(t, ast.Name)}
    return defined, attrs, aliases, stored - loaded


def _raw_tokens(source: str) -> list:
    """(type, text) of tokenize's tokens less noise, an f-string as one STRING, NEWLINE kept (it
    ends a logical line); stops quietly where the source stops being Python."""
    out, fstring = [], 0
    start, end = (_FSTRING[0], _FSTRING[-1]) if _FSTRING else (None, None)
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == start:
                fstring += 1
            elif tok.type == end:
                fstring -= 1
                if not fstring:
                    out.append((tokenize.STRING, "S"))
            elif fstring:
                continue                    # inside an f-string: its text and expressions
            elif tok.type == tokenize.NEWLINE or tok.type not in _DROP:
                out.append((tok.type, tok.string))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return out


def _logical_lines(raw: list) -> list:
    """Logical lines, less those that are only strings (docstrings, no-op strings)."""
    lines, line = [], []
    for tok in raw + [(tokenize.NEWLINE, "")]:
        if tok[0] == tokenize.NEWLINE:
            if line and not all(t[0] == tokenize.STRING for t in line):
                lines.append(line)
            line = []
        else:
            line.append(tok)
    return lines


def segments(source: str) -> list[list[str]]:
    """The normalised tokens of `source`, one list per definition (a function, method or class
    header with what precedes the next one): no k-gram spans two, so that reordering the
    definitions changes no fingerprint."""
    source, tree = _normalized(source)
    names = _names(tree)
    out, segment, decorated = [], [], False
    for line in _logical_lines(_raw_tokens(source)):
        if _padding(line, names):
            continue
        first = line[0][1]
        if first in ("def", "class", "async", "@") and not decorated and segment:
            out.append(_ungroup(segment))
            segment = []
        decorated = first == "@"
        said = _line_tokens(line, names)
        if said != ["V", "=", "V"]:                 # `_s.x = x`: a name given another
            segment += said
    if segment:
        out.append(_ungroup(segment))
    return out


def _padding(line: list, names) -> bool:
    """A statement that does nothing, as inserted between copied ones to break up their k-grams:
    `pass`, a bare constant or name, a call of a side-effect-free builtin (`print` included), or
    a store to a name never read whose calls are all such builtins."""
    defined, dead = names[0], names[3]
    texts = [text for _, text in line]
    if len(texts) == 1:
        return texts[0] == "pass" or not keyword.iskeyword(texts[0])
    # What each call calls: a method (after a dot) may change its object, so it is never pure.
    callees = {texts[i - 1] if i < 2 or texts[i - 2] != "." else "." + texts[i - 1]
               for i in range(1, len(texts)) if texts[i] == "("}
    pure = all(c in _PURE and c not in defined for c in callees)
    if texts[0] in dead and texts[1] in _ASSIGN:
        return pure
    return texts[0] in callees and texts[1] == "(" and pure and not _assigns(texts)


def _assigns(texts: list) -> bool:
    depth = 0
    for t in texts:
        depth += (t in "([{") - (t in ")]}") if len(t) == 1 else 0
        if depth == 0 and t in _ASSIGN:
            return True
    return False


def tokens(source: str) -> list[str]:
    """The normalised token sequence of `source` (what fingerprints hash), for reading."""
    return [t for seg in segments(source) for t in seg]


def _line_tokens(line: list, names) -> list[str]:
    """The normalised tokens of a logical line. A chain of names of the file's own (`_s.x`,
    `self.weight`, `ctx.group`: a root that is not an import, then attributes the file assigns
    or defines in a class) is one name, "V": moving a local onto an object (`x` becoming
    `_s.x`) changes no token. An API's attribute (`p.grad`, `t.add_`) stays, and so does a
    chain that starts from an import (`dist.all_reduce`)."""
    out, depth, own = [], 0, False
    is_import = line[0][1] in ("import", "from")
    for i, (kind, text) in enumerate(line):
        prev = line[i - 1] if i else (None, "")
        nxt = line[i + 1][1] if i + 1 < len(line) else ""
        if own and kind == tokenize.NAME and prev[1] == "." and text in names[1]:
            out.pop()                               # the ".": `_s.x` is one name
            continue
        own = own and text == "."
        if kind == tokenize.STRING:
            if prev[0] != tokenize.STRING:          # "a" "b" is one string
                out.append("S")
        elif kind == tokenize.NUMBER:
            out.append("N")
        elif kind == tokenize.NAME:
            said = _name(text, prev[1], nxt, depth, is_import, names)
            own = said == ["V"] and prev[1] != "." and not (depth and nxt == "=")
            out += said
        elif text == "," and nxt in (")", "]", "}"):
            continue                                # a trailing comma is formatting
        else:
            depth += (text in "([{") - (text in ")]}") if len(text) == 1 else 0
            out.append(text)
    return out


def _ungroup(toks: list) -> list:
    """Less the parentheses that only group (`return (a, b)`, `x = (y + z)`): formatters add and
    remove them. A call's parentheses, after a name or a closing bracket, stay."""
    out, calls = [], []
    for i, t in enumerate(toks):
        if t == "(":
            prev = toks[i - 1] if i else ""
            call = prev in (")", "]", "S") or (prev.isidentifier() and not keyword.iskeyword(prev))
            calls.append(call)
            if not call:
                continue
        elif t == ")" and calls and not calls.pop():
            continue
        out.append(t)
    return out


def _name(text, prev, nxt, depth, is_import, names) -> list[str]:
    defined, attrs, aliases = names[:3]
    if is_import:
        return ["V"] if prev == "as" else [text]    # module paths are API; the alias is not
    if keyword.iskeyword(text):
        return [text]
    if prev == ".":
        return ["V"] if text in attrs else [text]   # an API's attribute, unless the file makes it
    if depth and nxt == "=":
        return ["V"]                                # a keyword argument: named by either side
    if text in aliases:
        parts = aliases[text].split(".")
        return [x for p in parts for x in (".", p)][1:]
    if text in defined or text not in _BUILTINS:
        return ["V"]
    return [text]


# ---- fingerprints ------------------------------------------------------------------------------

_IDS: dict = {}


def _id(token: str) -> int:
    """A hash of a token that is the same in every process (str's hash() is salted)."""
    found = _IDS.get(token)
    if found is None:
        found = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "big") % _MOD
        if len(_IDS) < 100_000:
            _IDS[token] = found
    return found


def _kgrams(toks: list) -> list[int]:
    """The rolling (Rabin-Karp) hash of every run of K tokens."""
    if len(toks) < K:
        return []
    ids = [_id(t) for t in toks]
    high, h = pow(_BASE, K - 1, _MOD), 0
    for t in ids[:K]:
        h = (h * _BASE + t) % _MOD
    out = [h]
    for i in range(K, len(ids)):
        h = ((h - ids[i - K] * high) * _BASE + ids[i]) % _MOD
        out.append(h)
    return out


def _winnow(hashes: list) -> set[int]:
    """The smallest hash of every window of W (None: a k-gram of the base, never picked)."""
    if len(hashes) <= W:
        return {h for h in hashes if h is not None}
    picked = set()
    for i in range(len(hashes) - W + 1):
        window = [h for h in hashes[i:i + W] if h is not None]
        if window:
            picked.add(min(window))
    return picked


def _hashes(source: str) -> list[int]:
    return [h for seg in segments(source) for h in _kgrams(seg)]


@lru_cache(maxsize=16)
def _given(base: str) -> frozenset:
    """Every k-gram of a base (one stub serves a whole class)."""
    return frozenset(_hashes(base))


def fingerprints(source: str, base: str | None = None) -> set[int]:
    """The winnowed fingerprints of `source`, less every k-gram of `base` (the stub)."""
    hashes = _hashes(source)
    if base:
        given = _given(base)
        hashes = [None if h in given else h for h in hashes]
    return _winnow(hashes)


def similarity(a: set, b: set) -> float:
    """|a & b| / min(|a|, |b|): how much of the smaller is found in the larger (containment, as
    MOSS reports), so that code copied into a longer file, or a copy of half the reference, still
    scores high where Jaccard would dilute it. The smaller counts as at least FLOOR fingerprints,
    so that a few shared lines in a nearly empty file (a stub with one line filled) cannot score
    1.0. 0 when either is empty."""
    if not a or not b:
        return 0.0
    return len(a & b) / max(min(len(a), len(b)), FLOOR)


# ---- a class ----------------------------------------------------------------------------------

def compare_class(submissions: dict, reference: dict, stubs: dict, top: int = 20,
                  exercises=None) -> list[Pair]:
    """The closest pairs of each exercise: every student against "reference" and against every
    other student, each exercise's `top` best with a score above 0, then sorted by score (best
    first). submissions: {student: {module: source}}, every exercise module of a submission;
    reference and stubs: {exercise: source} (the stub is the base: what it holds is not
    counted); exercises: those compared (default: every one a submission or the reference has).

    A copy is found in whichever of the submission's modules it sits (compare_prints).

    No fingerprint is dropped for being common in the class (MOSS's -m): a whole class copying
    one leaked file is what that would hide, and honest code that the stub all but dictates
    scored at most 0.32 (NEAR_COPY)."""
    memo: dict = {}                         # identical files (a shared copy) are fingerprinted once
    prints = {s: {ex: memo.get((ex, src)) or memo.setdefault((ex, src), fingerprints(src, stubs.get(ex)))
                  for ex, src in subs.items()} for s, subs in submissions.items()}
    modules = {ex for subs in submissions.values() for ex in subs} | set(stubs) | set(reference)
    imports = {s: {ex: imported(src, modules) for ex, src in subs.items()} for s, subs in submissions.items()}
    return compare_prints(prints, {ex: fingerprints(src, stubs.get(ex)) for ex, src in reference.items()},
                          top, imports, exercises, {ex: imported(src, modules) for ex, src in stubs.items()})


def imported(source: str, modules) -> set[str]:
    """Which of `modules` (the exercise modules, siblings in the rtp_course package) `source`
    imports: `from .sharding import split`, `from . import sharding`, `import rtp_course.sharding`,
    `from rtp_course import sharding`, `from rtp_course.sharding import *`. (A dynamic import is
    the scan's: it flags importlib, __import__ and the like.)"""
    if len(source) > MAX_SOURCE:
        return set()
    try:
        nodes = ast.walk(ast.parse(source))
        found = set()
        for n in nodes:
            if isinstance(n, ast.Import):
                found |= {a.name.split(".")[1] for a in n.names if a.name.startswith("rtp_course.")}
            elif isinstance(n, ast.ImportFrom) and (n.level == 1 or n.module and n.module.split(".")[0]
                                                    == "rtp_course" and not n.level):
                path = (n.module or "").split(".")[0 if n.level else 1:]
                found |= {path[0]} if path and path[0] else {a.name for a in n.names}
        return found & set(modules)
    except Exception:                       # noqa: BLE001 - a crafted file ends no review
        return set()


def compare_prints(prints: dict, reference: dict, top: int = 20, imports=None, exercises=None,
                   given=None) -> list[Pair]:
    """compare_class on fingerprints already made: {student: {module: set}}, {exercise: set}
    (the grader's review makes a class's in a bounded worker: review/worker.py); imports:
    {student: {module: the modules it imports}}; exercises: those compared (default: all);
    given: {module: the modules its stub imports}.

    An exercise's code is its module with every sibling module it imports that its stub does
    not (transitively: a comm.py of one line, `from .sharding import *`, runs sharding.py; the
    stub's own imports, tensor_parallel's of comm, are exercises graded on their own). It is
    compared with the other party's code where it may sit in a submission: that code, its
    module alone, and each other module alone (a copy parked anywhere). The score is the best
    of them; Pair.where names the place when it is not the exercise's module. A copy split
    over modules that the exercise reaches other than by an import its stub lacks is not
    pooled (the scan flags dynamic imports)."""
    imports, given = imports or {}, given or {}
    if exercises is None:
        exercises = {ex for subs in prints.values() for ex in subs} | set(reference)
    pairs = []
    for ex in sorted(exercises):
        places = {s: _places(ex, subs, imports.get(s, {}), given) for s, subs in sorted(prints.items())
                  if ex in subs}
        found = []
        if ex in reference:
            found += [_found(s, "reference", ex, reference[ex], where) for s, where in places.items()]
        for a, b in combinations(places, 2):
            one, two = _found(a, b, ex, places[b][0][1], places[a]), _found(b, a, ex, places[a][0][1], places[b])
            best = max(one, two, key=lambda p: (p.score, bool(p.where)))     # a tie: say where
            found.append(best if best.where else Pair(a, b, ex, best.score, best.near_copy))
        pairs += sorted((p for p in found if p.score > 0), key=_order)[:top]
    return sorted(pairs, key=_order)


def _places(ex: str, modules: dict, imports: dict, given: dict) -> list:
    """[(where, fingerprints)] where exercise `ex`'s code may sit in one submission, its code
    first (where ""): its module with the siblings it imports beyond its stub's imports, then
    its module alone (if that differs), then every other module alone."""
    reached, todo = {ex}, [ex]
    while todo:
        module = todo.pop()
        for sibling in set(imports.get(module, ())) - set(given.get(module, ())):
            if sibling not in reached and sibling in modules:
                reached.add(sibling)
                todo.append(sibling)
    if len(reached) == 1:
        out = [("", modules[ex])]
    else:
        others = ", ".join(f"{m}.py" for m in sorted(reached - {ex}))
        out = [("", set().union(*(modules[m] for m in reached))), (f"{ex}.py", modules[ex])]
        out[0] = (f"{ex}.py with {others}, which it imports", out[0][1])
    return out + [(f"{m}.py", fp) for m, fp in sorted(modules.items()) if m != ex and fp]


def _found(holder: str, other: str, exercise: str, theirs: set, places: list) -> Pair:
    """The pair of `holder` (its places) and `other` (`theirs`: its exercise's code)."""
    if not theirs:
        return Pair(holder, other, exercise, 0.0, False)
    score, where = max(((round(similarity(theirs, fp), 4), where) for where, fp in places if fp),
                       key=lambda found: found[0], default=(0.0, ""))       # a tie: the first place
    return Pair(holder, other, exercise, score, score >= NEAR_COPY, where)


def _order(p: Pair):
    return (-p.score, p.exercise, p.a, p.b)
