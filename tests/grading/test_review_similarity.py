"""rtp_course.instructor.review.similarity, calibrated on real data: a renamed, reformatted, reordered
reference is a near copy; the edits of it in tests/correct/ score high; independent
implementations score low; the stub, once it is the base, shares nothing."""
import ast
import functools
import io
import keyword
import os
import statistics
import sys
import tokenize
from pathlib import Path

import pytest

from rtp_course.course import EXERCISES
from rtp_course.instructor.review.similarity import (NEAR_COPY, Pair, compare_class, fingerprints, normalize,
                                                     segments, similarity, tokens)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
import wrongs  # noqa: E402  (tests/helpers/wrongs.py: builds the tests/correct entries)


def reference(ex, base=""):
    """The reference of `ex`, or with base "simple" the stub's design it starts with."""
    return wrongs.simple_design(ex) if base == "simple" else (ROOT / "solutions" / f"{ex}.py").read_text()


def stub(ex):
    return (ROOT / "rtp_course" / f"{ex}.py").read_text()


# ---- a student's disguise of a copied file -------------------------------------------------------

KEEP = {"forward", "backward", "__init__", "self", "cls", "ctx"}    # what torch calls by name


def _own_names(tree):
    """The names the file defines, and the attributes it defines (methods, fields, ctx/self)."""
    names, attrs = set(), set()
    for n in ast.walk(tree):
        if isinstance(n, ast.ClassDef):
            attrs |= {m.name for m in n.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
            attrs |= {m.target.id for m in n.body
                      if isinstance(m, ast.AnnAssign) and isinstance(m.target, ast.Name)}
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.arg):
            names.add(n.arg)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) \
                and isinstance(n.value, ast.Name) and n.value.id in ("self", "ctx"):
            attrs.add(n.attr)
        elif isinstance(n, ast.alias) and n.asname:
            names.add(n.asname)
    drop = {x for x in names | attrs if x.startswith("__") or x in KEEP}
    return names - drop, attrs - drop


def rename(source):
    """Every identifier the file defines renamed (a call's keywords left: torch's own)."""
    names, attrs = _own_names(ast.parse(source))
    new = {n: f"q{i}x" for i, n in enumerate(sorted(names | attrs))}
    toks = list(tokenize.generate_tokens(io.StringIO(source).readline))
    out, prev, depth, in_def = [], None, 0, False
    for i, tok in enumerate(toks):
        s, nxt = tok.string, toks[i + 1].string if i + 1 < len(toks) else ""
        if s == "def":
            in_def = True
        elif tok.type == tokenize.OP and s in "([{":
            depth += 1
        elif tok.type == tokenize.OP and s in ")]}":
            depth -= 1
            in_def = in_def and depth > 0
        keyword_arg = depth > 0 and nxt == "=" and not in_def
        if tok.type == tokenize.NAME and s in new and not keyword.iskeyword(s) and not keyword_arg:
            if (prev == "." and s in attrs) or (prev != "." and s in names):
                s = new[s]
        out.append((tok.type, s))
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            prev = tok.string
    return tokenize.untokenize(out)


def reformat(source):
    """Top-level definitions in reverse order, every docstring rewritten, comments dropped,
    others added, every line break and parenthesis as ast.unparse writes them."""
    tree = ast.parse(source)
    first = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom, ast.Expr))]
    tree.body = first + [n for n in tree.body if n not in first][::-1]
    for n in ast.walk(tree):
        body = getattr(n, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0].value, "value", None), str):
            body[0].value.value = "In my own words: " + body[0].value.value[::-1][:40]
    lines = []
    for i, line in enumerate(ast.unparse(tree).splitlines()):
        if line.lstrip().startswith(("def ", "class ")):
            lines += ["", f"# step {i}"]
        lines.append(line)
    return "\n".join(lines) + "\n"


def disguise(source):
    return reformat(rename(source))


def test_the_disguise_changes_every_defined_name_and_the_layout():
    ref = reference("comm")
    d = disguise(ref)
    ast.parse(d)
    assert "Duplication" not in d and "def _world" not in d and "ctx.group" not in d
    assert "dist.all_reduce" not in d and ".all_reduce(" in d      # the alias renamed, the API kept
    assert len(set(d.splitlines()) & set(ref.splitlines())) < 25    # blank lines, imports, decorators


@pytest.mark.parametrize("exercise", EXERCISES)
def test_a_disguised_reference_is_a_near_copy(exercise):
    ref, base = reference(exercise), stub(exercise)
    score = similarity(fingerprints(ref, base), fingerprints(disguise(ref), base))
    assert score >= 0.95, score
    pairs = compare_class({"mallory": {exercise: disguise(ref)}}, {exercise: ref}, {exercise: base})
    assert [(p.a, p.b, p.near_copy) for p in pairs] == [("mallory", "reference", True)]
    assert pairs[0].score >= 0.95


# ---- each disguise by itself, and all at once --------------------------------------------------

def identity_wrap(source, how="def"):
    """Every name the code reads wrapped in an identity call: `_i(torch).zeros(...)`,
    `_i(dist).all_reduce(_i(t))`, with `def _i(x): return x` (how="def"), `_i = lambda x: x`
    ("assigned"), `(lambda x: x)(...)` inline ("lambda"), or a staticmethod of a class of the
    file's called as `_W._i(...)` ("method"). Runs as the original does."""
    tree = ast.parse(source)
    helper = {"def": "def _i(x):\n    return x\n", "assigned": "_i = lambda x: x\n",
              "method": "class _W:\n    @staticmethod\n    def _i(x):\n        return x\n"}.get(how, "")

    class Wrap(ast.NodeTransformer):
        def visit_Name(self, node):
            if not isinstance(node.ctx, ast.Load) or node.id == "super":
                return node
            func = {"lambda": "(lambda x: x)", "method": "_W._i"}.get(how, "_i")
            return ast.Call(ast.parse(func, mode="eval").body, [node], [])
    tree = Wrap().visit(tree)
    at = max([i + 1 for i, n in enumerate(tree.body) if isinstance(n, (ast.Import, ast.ImportFrom))] + [0])
    tree.body[at:at] = ast.parse(helper).body
    return ast.unparse(ast.fix_missing_locations(tree))


def reorder(source):
    """The top-level functions and classes in reverse order, their text as it is."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    start = lambda n: min([n.lineno] + [d.lineno for d in n.decorator_list]) - 1  # noqa: E731
    head = "".join(lines[:start(defs[0])])
    return head + "\n\n".join("".join(lines[start(n):n.end_lineno]) for n in reversed(defs)) + "\n"


def annotate(source):
    """A docstring in every function and class, and a comment above every statement."""
    tree = ast.parse(source)
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            n.body.insert(0, ast.Expr(ast.Constant(f"{n.name}: my own notes on what this does.")))
    out = []
    for line in ast.unparse(ast.fix_missing_locations(tree)).splitlines():
        body = line.lstrip()
        if body and not body.startswith(("'", '"', "@", "else", "elif", "except", "finally")):
            out.append(" " * (len(line) - len(body)) + f"# {body.split(' ')[0]}: explained here")
        out.append(line)
    return "\n".join(out) + "\n"


def strip(source):
    """Every docstring and comment removed."""
    tree = ast.parse(source)
    for n in ast.walk(tree):
        body = getattr(n, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0].value, "value", None), str):
            n.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def dead_code(source):
    """Code that never runs or changes nothing, between every two statements: an `if False:`
    block, a store to a name never read, a statement after each return, and unused helpers."""
    count = iter(range(10 ** 6))

    class Dead(ast.NodeTransformer):
        def generic_visit(self, node):
            super().generic_visit(node)
            inside = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for field in ("body", "orelse"):
                body = getattr(node, field, None)
                if not (inside or isinstance(node, (ast.For, ast.If, ast.With, ast.While))) \
                        or not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
                    continue
                out = []
                for st in body:
                    out.append(st)
                    i = next(count)
                    junk = [f"if False:\n    torch.manual_seed({i})\n    _tmp{i} = torch.ones({i}).sum()",
                            f"_scratch{i} = torch.zeros({i % 7 + 1}) * {i}",
                            f"while 0:\n    print({i})"][i % 3]
                    out += ast.parse(junk).body
                    if isinstance(st, ast.Return):
                        out += ast.parse(f"_after{i} = torch.empty({i})").body
                setattr(node, field, out)
            return node
    tree = Dead().visit(ast.parse(source))
    tree.body += ast.parse("def _unused_helper(t, k=3):\n    return torch.stack([t] * k).mean(0)\n").body
    return ast.unparse(ast.fix_missing_locations(tree))


def pad_around(source, make):
    """`make(params)`'s statements before and after every statement, as a padder inserts no-ops
    that break up every copied k-gram (params: the enclosing function's own parameters, so that
    the padding can name a value, `x.shape`); the imports they use at the top. Runs as the
    original does."""
    return _each_statement(source, lambda st, params: [*_parse(make(params)), st, *_parse(make(params))])


def wrap_each(source, header):
    """Every statement (but a definition, an import, a docstring, a break or continue) in a
    block that runs it once, as it is: `if True:`, `for _once in range(1):`, `with nullcontext():`."""
    def wrap(st, params):
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom,
                           ast.Break, ast.Continue)) \
                or isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
            return [st]
        block = ast.parse(header + "\n    pass").body[0]
        block.body = [st]
        return [block]
    return _each_statement(source, wrap)


def _parse(statements):
    return [s for text in statements for s in ast.parse(text).body]


def _each_statement(source, replace):
    class Each(ast.NodeTransformer):
        params = []

        def visit_FunctionDef(self, node):
            outer = self.params
            self.params = [a.arg for a in node.args.args if a.arg not in ("self", "cls", "ctx")]
            self.generic_visit(node)
            self.params = outer
            return node
        visit_AsyncFunctionDef = visit_FunctionDef

        def generic_visit(self, node):
            super().generic_visit(node)
            for field in ("body", "orelse", "finalbody"):
                body = getattr(node, field, None)
                if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                    setattr(node, field, [s for st in body for s in replace(st, self.params)])
            return node
    tree = Each().visit(ast.parse(source))
    tree.body[:0] = ast.parse("import math, os, sys, time\nfrom contextlib import nullcontext").body
    return ast.unparse(ast.fix_missing_locations(tree))


def shape_and_len(params):
    if not params:
        return ["len(())"]
    x = params[0]
    return [f"{x}.shape if torch.is_tensor({x}) else None",
            f"len({x}) if isinstance({x}, (list, tuple)) else 0",
            f"torch.is_tensor({x})", f"{x}.__class__"]


def onto_object(source, shared=False):
    """Every function's parameters and locals moved onto an object, `x` read and written as
    `_ns.x`: a namespace made per call with the parameters as keywords,
    `_ns = types.SimpleNamespace(x=x, group=group)` (shared=False), or one module-level instance
    of a class of the file's own that every function copies its parameters onto (`_G.x = x`,
    shared=True). Names that a nested function, lambda or comprehension reads stay plain (a
    namespace would change their scope). Runs as the original does."""
    tree = ast.parse(source)
    holder = "_G" if shared else "_ns"
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp,
              ast.SetComp, ast.DictComp, ast.GeneratorExp)
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        inner = {id(x) for sub in ast.walk(fn) if sub is not fn and isinstance(sub, nested) for x in ast.walk(sub)}
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
        stored = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                  and id(n) not in inner}
        seen_inside = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and id(n) in inner}
        declared = {g for n in ast.walk(fn) if isinstance(n, (ast.Global, ast.Nonlocal)) for g in n.names}
        moved = (set(params) | stored) - seen_inside - declared - {"self", "cls", "ctx"}
        if not moved:
            continue

        class Move(ast.NodeTransformer):
            def visit_Name(self, n):
                if n.id in moved and id(n) not in inner:
                    return ast.Attribute(ast.Name(holder, ast.Load()), n.id, n.ctx)
                return n
        doc = 1 if isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) else 0
        given = [p for p in params if p in moved]
        start = [f"{holder}.{p} = {p}" for p in given] if shared else \
            [f"{holder} = types.SimpleNamespace({', '.join(f'{p}={p}' for p in given)})"]
        fn.body[doc:] = _parse(start) + [Move().visit(st) for st in fn.body[doc:]]
    state = "class _State:\n    pass\n\n\n_G = _State()\n" if shared else ""
    return "import types\n" + state + ast.unparse(ast.fix_missing_locations(tree)) + "\n"


# The seventh red team's shareable scripts (rt7, A05 and A20), each transformation written out
# again here: every one keeps what the module does (the checks pass), and together they took
# the reference to 0.33-0.48 against itself.

_SWAPPED = (ast.Mult, ast.BitAnd, ast.BitOr, ast.BitXor)      # `+` may concatenate: left alone
_MIRROR = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE, ast.Eq: ast.Eq,
           ast.NotEq: ast.NotEq, ast.Is: ast.Is, ast.IsNot: ast.IsNot}


class _Mirror(ast.NodeTransformer):
    """`a * b` as `b * a` (and &, |, ^), `a < b` as `b > a`, `a == b` as `b == a`, a chain
    `a < b <= c` as `c >= b > a`."""

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, _SWAPPED):
            node.left, node.right = node.right, node.left
        return node

    def visit_Compare(self, node):
        self.generic_visit(node)
        if all(type(op) in _MIRROR for op in node.ops):
            operands = [node.left, *node.comparators][::-1]
            return ast.Compare(operands[0], [_MIRROR[type(op)]() for op in node.ops[::-1]], operands[1:])
        return node


def swap_operands(source):
    return ast.unparse(ast.fix_missing_locations(_Mirror().visit(ast.parse(source))))


def comprehensions_as_loops(source):
    """Every `x = [e for v in xs if c]` (a set or dict comprehension likewise, any number of
    `for`s) as `_built = []`, the loops and ifs, `_built.append(e)` (`.add(e)`, `_built[k] = v`)
    innermost, then `x = _built`."""
    count = iter(range(10 ** 6))

    class Loops(ast.NodeTransformer):
        def visit_Assign(self, node):
            self.generic_visit(node)
            comp = node.value
            if not isinstance(comp, (ast.ListComp, ast.SetComp, ast.DictComp)) \
                    or any(g.is_async for g in comp.generators):
                return node
            built = f"_built{next(count)}"
            if isinstance(comp, ast.DictComp):
                start, inner = "{}", f"{built}[{ast.unparse(comp.key)}] = {ast.unparse(comp.value)}"
            else:
                start = "[]" if isinstance(comp, ast.ListComp) else "set()"
                verb = "append" if isinstance(comp, ast.ListComp) else "add"
                inner = f"{built}.{verb}({ast.unparse(comp.elt)})"
            body = ast.parse(inner).body
            for g in reversed(comp.generators):
                for test in reversed(g.ifs):
                    body = [ast.If(test, body, [])]
                body = [ast.For(g.target, g.iter, body, [])]
            return [ast.parse(f"{built} = {start}").body[0], *body,
                    ast.Assign(node.targets, ast.Name(built, ast.Load()))]
    return ast.unparse(ast.fix_missing_locations(Loops().visit(ast.parse(source))))


def keywords_reversed(source):
    class Reverse(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            if all(k.arg for k in node.keywords):
                node.keywords = node.keywords[::-1]
            return node
    return ast.unparse(Reverse().visit(ast.parse(source)))


def size_for_shape(source):
    """`x.shape[i]` read as `x.size(i)`."""
    class Size(ast.NodeTransformer):
        def visit_Subscript(self, node):
            self.generic_visit(node)
            if isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "shape" and not isinstance(node.slice, ast.Slice):
                return ast.Call(ast.Attribute(node.value.value, "size", ast.Load()), [node.slice], [])
            return node
    return ast.unparse(ast.fix_missing_locations(Size().visit(ast.parse(source))))


def methods_through_type(source):
    """`x.m(a)` as `type(x).m(x, a)` where x is a parameter or a local of the file's (not
    `self`, a module or a class), m no dunder."""
    tree = ast.parse(source)
    local = {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    local |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    local -= {"self", "cls"} | {(a.asname or a.name).split(".")[0] for n in ast.walk(tree)
                                if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}

    class Through(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in local \
                    and not f.attr.startswith("__"):
                owner = ast.Call(ast.Name("type", ast.Load()), [ast.Name(f.value.id, ast.Load())], [])
                return ast.Call(ast.Attribute(owner, f.attr, ast.Load()), [f.value, *node.args], node.keywords)
            return node
    return ast.unparse(ast.fix_missing_locations(Through().visit(tree)))


def bool_around_tests(source):
    """Every `if`, `while` and conditional expression's test as `bool(test)`."""
    class Bool(ast.NodeTransformer):
        def visit_If(self, node):
            self.generic_visit(node)
            node.test = ast.Call(ast.Name("bool", ast.Load()), [node.test], [])
            return node
        visit_While = visit_IfExp = visit_If
    return ast.unparse(ast.fix_missing_locations(Bool().visit(ast.parse(source))))


def rewritten_by_script(source):
    """All of the A05 script's rewrites, one after another, as a student who shares it runs it."""
    for step in (swap_operands, comprehensions_as_loops, keywords_reversed, size_for_shape,
                 methods_through_type, bool_around_tests):
        source = step(source)
    return source


def pad_with_constant(source, constants="_NAP = 0", statement="time.sleep(_NAP)"):
    """`statement` after every statement, its argument a module-level name bound once to a
    constant (a literal argument, `time.sleep(0)`, was already padding)."""
    return f"import time\n{constants}\n" + pad(source, statement)


DISGUISES = {
    "renamed and reformatted": disguise,
    "identity-wrapped": identity_wrap,
    "identity lambda assigned": lambda s: identity_wrap(s, "assigned"),
    "identity lambda inline": lambda s: identity_wrap(s, "lambda"),
    "identity staticmethod": lambda s: identity_wrap(s, "method"),
    "functions reordered": reorder,
    "comments and docstrings added": annotate,
    "comments and docstrings removed": strip,
    "dead code added": dead_code,
    "padded with no-op torch calls": lambda s: pad_around(
        s, lambda p: ["torch.is_grad_enabled()", "torch.get_default_dtype()"]),
    "padded with calls through other modules": lambda s: pad_around(
        s, lambda p: ["os.getpid()", "math.sqrt(2.0)", "time.perf_counter()", "sys.getrecursionlimit()"]),
    "padded with x.shape and len(x)": lambda s: pad_around(s, shape_and_len),
    "padded with stores nothing reads": lambda s: pad_around(
        s, lambda p: ["_c = 0", "_c += 1", "_a, _b = (1, 2)", "del _a", "assert True"]),
    "each statement in if True:": lambda s: wrap_each(s, "if True:"),
    "each statement in a loop run once": lambda s: wrap_each(s, "for _once in range(1):"),
    "each statement in nullcontext": lambda s: wrap_each(s, "with nullcontext():"),
    "padded with calls of a no-op of its own": lambda s: "def _pad(*args):\n    pass\n" + pad_around(
        s, lambda p: [f"_pad({', '.join(p)})"]),
    "locals moved onto a namespace per call": onto_object,
    "operands and comparisons swapped": swap_operands,
    "comprehensions as loops": comprehensions_as_loops,
    "keyword arguments reversed": keywords_reversed,
    "x.shape[i] as x.size(i)": size_for_shape,
    "methods called through type(x)": methods_through_type,
    "tests through bool()": bool_around_tests,
    "the A05 script's rewrites at once": rewritten_by_script,
    "padded with a sleep of a module-level zero": pad_with_constant,
    "padded with a sleep of constants folded": lambda s: pad_with_constant(
        s, "_PAUSE = 0.0\n_STEPS = 4\n_EACH = _PAUSE / _STEPS", "time.sleep(_EACH * 2)"),
    "padded with blocks on a module-level False": lambda s: pad_with_constant(
        s, "_DEBUG = not 1", "if _DEBUG:\n    time.sleep(time.time() % 1)"),
    "all at once": lambda s: disguise(rewritten_by_script(pad_with_constant(
        dead_code(identity_wrap(annotate(strip(reorder(s)))))))),
}


@functools.lru_cache(maxsize=None)
def reference_prints(exercise):
    return fingerprints(reference(exercise), stub(exercise))


def test_the_disguises_change_the_code():
    ref = reference("comm")
    for name, make in DISGUISES.items():
        copy = make(ref)
        ast.parse(copy)
        assert copy != ref, name
    assert "_i(dist).all_reduce(_i(grad)" in identity_wrap(ref)
    assert "(lambda x: x)(dist).all_reduce" in identity_wrap(ref, "lambda")
    assert "if False:" in dead_code(ref) and "_scratch" in dead_code(ref)
    assert '"""' not in strip(ref) and "#" not in strip(ref)
    assert reorder(ref).index("def split") < reorder(ref).index("class Duplication")
    padded = DISGUISES["padded with no-op torch calls"](ref)
    assert padded.count("torch.is_grad_enabled()") > 2 * len(ast.parse(ref).body)
    assert "x.shape if torch.is_tensor(x) else None" in pad_around(ref, shape_and_len)
    wrapped = wrap_each(ref, "if True:")
    assert wrapped.count("if True:") > 20 and "if True:\n            dist.all_reduce(" in wrapped


# Every disguise on three exercises of different shapes, and all of them at once on every
# exercise, in the default tier; the rest of the cross product in the extended tier.
SAMPLED = ("comm", "rotation", "sharding")
DISGUISE_CASES = [pytest.param(ex, name, id=f"{ex}-{name}",
                               marks=() if ex in SAMPLED or name == "all at once"
                               else pytest.mark.extended)
                  for ex in EXERCISES for name in DISGUISES]


@pytest.mark.parametrize("exercise, name", DISGUISE_CASES)
def test_each_disguise_of_the_reference_is_a_near_copy(exercise, name):
    """Identity wrappers once scored 0.01-0.05 (every k-gram broken by `_i(`), dead code between
    statements 0.1-0.5: full points and no near-copy row."""
    copy = DISGUISES[name](reference(exercise))
    score = similarity(reference_prints(exercise), fingerprints(copy, stub(exercise)))
    assert score >= 0.9, (name, score)


@pytest.mark.parametrize("exercise", EXERCISES)
def test_a_copy_whose_locals_live_on_one_shared_object_is_a_near_copy(exercise):
    """The red team moved every parameter and local of the comm reference onto a per-call
    SimpleNamespace (`_s.x`: each name token became three): 0.165, no near-copy row. Names moved
    onto an object are names again, whether the object is made per call (DISGUISES) or is one
    module-level instance that every function writes onto."""
    copy = onto_object(reference(exercise), shared=True)
    assert "_G.group" in copy or "_G." in copy
    score = similarity(reference_prints(exercise), fingerprints(copy, stub(exercise)))
    assert score >= 0.85, score


def test_names_moved_onto_an_object_are_names_again_and_module_calls_stay():
    code = '''
import types
import torch.distributed as dist


def mean(t, group=None):
    _s = types.SimpleNamespace(t=t)
    _s.group = group
    _s.n = dist.get_world_size(_s.group)
    dist.all_reduce(_s.t, group=_s.group)
    return _s.t / _s.n
'''
    text = normalize(code)
    assert "_s." not in text and "n = dist.get_world_size(group)" in text
    assert "dist.all_reduce(t, group=group)" in text and "return t / n" in text
    toks = tokens("class A:\n    def go(self, p):\n        self.total = p.grad\n        return self.total.add_(1)\n")
    assert "grad" in toks and "add_" in toks and "total" not in toks
    assert toks.count(".") == 2                     # `p.grad`, `.add_`; `self.total` is one name
    assert "all_reduce" in tokens(code) and "distributed" in tokens(code)


def test_an_identity_wrapped_copy_of_a_classmate_is_a_near_copy():
    base = stub("rotation")
    mallory = disguise(identity_wrap(ROTATION_A))
    pairs = compare_class({"ann": {"rotation": ROTATION_A}, "bob": {"rotation": ROTATION_B},
                           "mallory": {"rotation": mallory}}, {"rotation": reference("rotation")},
                          {"rotation": base})
    assert [(p.a, p.b) for p in pairs if p.near_copy] == [("ann", "mallory")]
    assert pairs[0].score >= 0.9


def test_the_normalisation_inlines_identities_and_drops_dead_code_only():
    code = '''
import torch
import torch.distributed as dist
ident = lambda v: v


def _i(x, unused=None):
    """Returns its argument."""
    return x


def _j(a, b):
    c = b
    return c


class Box:
    def same(self, y):
        return y

    def run(self, t):
        if False:
            t = t * 2
        total = torch.zeros(3)
        out = self.same(_i(getattr(dist, "all_reduce")))(ident((lambda z: z)(_j(0, b=t))))
        return out
        print("never")
'''
    text = normalize(code)
    assert "return dist.all_reduce(t)" in text          # `out`, a temporary returned, inlined
    assert "def _i" not in text and "def _j" not in text and "ident" not in text and "lambda" not in text
    assert "False" not in text and "total" not in text and "never" not in text
    assert "def same" in text                       # a method stays: something may call it


def test_honest_code_is_not_rewritten_by_the_inlining():
    """No reference, stub or correct alternative has an identity function or getattr by a
    constant: the normalisation only drops their comments, docstrings and dead stores."""
    from rtp_course.instructor.review import similarity as module
    sources = [reference(ex) for ex in EXERCISES] + [stub(ex) for ex in EXERCISES]
    sources += [wrongs.build(p) for p, _ in correct_alternatives()]
    assert len(sources) > 60
    for source in sources:
        nodes = list(ast.walk(ast.parse(source)))
        identities = module._identities(nodes)
        assert not identities[0] and not identities[1]
        assert not any(module._replacement(n, identities) for n in nodes if isinstance(n, ast.Call))


def test_no_honest_pair_is_a_near_copy():
    """Independent implementations, and students who handed in the stubs, against the reference
    and each other, after the normalisation (the correct alternatives in tests/correct are
    edits of the reference: near copies by construction, test_the_correct_alternatives_...)."""
    refs = {ex: reference(ex) for ex in EXERCISES}
    stubs = {ex: stub(ex) for ex in EXERCISES}
    pairs = compare_class({"ann": {"rotation": ROTATION_A, "comm": COMM},
                           "bob": {"rotation": ROTATION_B, "groups": GROUPS},
                           "dan": {"data_parallel": DATA_PARALLEL}, "idle": dict(stubs),
                           "idle2": dict(stubs)}, refs, stubs, top=100)
    assert {p.exercise for p in pairs} == {"rotation", "comm", "groups", "data_parallel"}
    assert max(p.score for p in pairs) < 0.3, pairs[:3]
    assert not any(p.near_copy for p in pairs)


def pad(source, statement):
    """`statement` after every statement: padding that breaks up the copied k-grams."""
    class Pad(ast.NodeTransformer):
        def generic_visit(self, node):
            super().generic_visit(node)
            for field in ("body", "orelse", "finalbody"):
                body = getattr(node, field, None)
                if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                    setattr(node, field, [s for st in body for s in (
                        [st] if isinstance(st, (ast.Return, ast.Raise))
                        else [st, ast.parse(statement).body[0]])])
            return node
    return ast.unparse(Pad().visit(ast.parse(source)))


@pytest.mark.parametrize("statement", ["pass", "_unused = None", "print(end='')", "_n = len('x')",
                                       "torch.is_grad_enabled()", "torch.get_default_dtype()", "x.shape",
                                       "len(x)"])
def test_a_copy_padded_with_statements_that_do_nothing_is_a_near_copy(statement):
    ref, base = reference("rotation"), stub("rotation")
    padded = pad(disguise(ref), statement)
    assert padded.count(statement.split("(")[0]) > 20
    assert similarity(fingerprints(ref, base), fingerprints(padded, base)) >= 0.95


@pytest.mark.parametrize("statement", [
    "import math", "x: object", "assert x is not None or x is None", "if x is None:\n    pass",
    "for _ in ():\n    pass", "try:\n    pass\nexcept Exception:\n    raise",
    "with torch.enable_grad():\n    pass"])
@pytest.mark.parametrize("exercise", ["comm", "rotation", "sharding"])
def test_a_copy_padded_with_blocks_and_bindings_that_do_nothing_is_a_near_copy(exercise, statement):
    """The fourth red team's padding, one after every statement: 0.26-0.48, full points and no
    near-copy row. An import or a bare annotation nothing reads, an assert that only reads,
    and a block of `pass` on what only reads are set aside."""
    ref, base = reference(exercise), stub(exercise)
    padded = pad(disguise(ref), statement)
    assert similarity(fingerprints(ref, base), fingerprints(padded, base)) >= 0.9


@pytest.mark.parametrize("made, statement", [("_t = []", "_t.append(0)"), ("_c = [0]", "_c[0] += 1"),
                                             ("_s = set()", "_s.add(id(_s))")])
@pytest.mark.parametrize("exercise", ["comm", "rotation", "sharding"])
def test_a_copy_padded_with_writes_into_what_nothing_reads_is_a_near_copy(exercise, made, statement):
    """The fifth red team's padding: a module-level object written after every statement and
    never read otherwise: 0.36-0.49."""
    ref, base = reference(exercise), stub(exercise)
    padded = made + "\n" + pad(disguise(ref), statement)
    assert similarity(fingerprints(ref, base), fingerprints(padded, base)) >= 0.9


@pytest.mark.parametrize("script", ["A05", "A20"])
@pytest.mark.parametrize("exercise", EXERCISES)
def test_a_copy_made_by_the_seventh_red_teams_scripts_is_a_near_copy(exercise, script):
    """A05 (operands and comparisons swapped, comprehensions as loops, keywords reversed,
    `x.size(i)` for `x.shape[i]`, `type(x).m(x, ...)`, `if bool(c):`) took the reference to
    0.33-0.48 against itself, A20 (`time.sleep(_NAP)` after every statement, `_NAP = 0`) to
    0.39-0.48: full points and no near-copy row. Each rewrite is undone by the normal form."""
    ref, base = reference(exercise), stub(exercise)
    copy = rewritten_by_script(ref) if script == "A05" else pad_with_constant(ref)
    assert copy != ref
    pairs = compare_class({"mallory": {exercise: copy}}, {exercise: ref}, {exercise: base})
    assert [(p.a, p.b, p.near_copy) for p in pairs] == [("mallory", "reference", True)]
    assert pairs[0].score >= 0.9, pairs[0]


RETURN = "\nreturn (y, ok, n, r, z)"      # what each case computes, read (a store nothing reads is dropped)


@pytest.mark.parametrize("one, other", [
    ("y = a * b + c", "y = c + b * a"),
    ("y = (a & b) | (c ^ d)", "y = (d ^ c) | (b & a)"),
    ("ok = a < b <= c", "ok = c >= b > a"),
    ("ok = x is None and n != 0 or not y", "ok = not y or 0 != n and None is x"),
    ("f(t, group=g, dim=d, op=o)", "f(t, op=o, dim=d, group=g)"),
    ("n = t.shape[d] // x.size()[0]", "n = t.size(d) // x.shape[0]"),
    ("t.add_(u, alpha=2)", "type(t).add_(t, u, alpha=2)"),
    ("t.add_(u)", "t.__class__.add_(t, u)"),
    ("t.add_(u)", "torch.Tensor.add_(t, u)"),
    ("while n > 0:\n    n = g(n)\nz = a if c else b", "while bool(0 < n):\n    n = g(n)\nz = a if bool(c) else b"),
    ("assert not x, 'no'", "assert not bool(x), 'no'"),
    ("r = [e(v) for v in xs if v > 0 if p(v)]",
     "r = []\nfor v in xs:\n    if bool(0 < v):\n        if p(v):\n            type(r).append(r, e(v))"),
    ("r = {v for u in xs for v in u}", "r = set()\nfor u in xs:\n    for v in u:\n        r.add(v)"),
    ("r = [v * 2 for v in xs]", "r = list()\nfor v in xs:\n    r += [2 * v]"),
    ("r = [v for v in xs]", "r = []\nfor v in xs:\n    r.extend([v])"),
    ("r = {k: f(k) for k in ks}", "r = dict()\nfor k in ks:\n    r[k] = f(k)"),
])
def test_the_normal_form_makes_one_of_each_spelling_and_order(one, other):
    one, other = normal_forms("import torch\n\n\ndef go(a, b, c, d, e, f, g, n, o, p, t, u, x, xs, y, ks):\n",
                              one, other)
    assert one == other, (one, other)


def normal_forms(head, *bodies):
    """normalize() of `head` followed by each body, indented, ending with RETURN."""
    indent = lambda code: "".join(f"    {line}\n" for line in (code + RETURN).splitlines())  # noqa: E731
    return [normalize(head + indent(body)) for body in bodies]


@pytest.mark.parametrize("one, other", [
    ("y = a - b", "y = b - a"),
    ("y = a @ b", "y = b @ a"),
    ("y = [a] + b", "y = b + [a]"),                     # a list written out: concatenation
    ("y = 'a' + b", "y = b + 'a'"),
    ("ok = a in b", "ok = b in a"),
    ("ok = f(a) and g(b)", "ok = g(b) and f(a)"),        # calls: the order of effects
    ("r = []\nfor v in xs:\n    r.append(v)\n    g(v)", "r = [v for v in xs]\ng(v)"),
    ("r = []\nfor v in xs:\n    r.append(r[-1])", "r = [r[-1] for v in xs]"),
    ("r = [0]\nfor v in xs:\n    r.append(v)", "r = [0] + [v for v in xs]"),
    ("r = []\nfor v in xs:\n    r += v", "r = [v for v in xs]"),
    ("r = []\nfor v in xs:\n    r.extend([v, v])", "r = [v for v in xs]"),
    ("r = []\nfor v in xs:\n    y.extend([v])", "r = [v for v in xs]"),
    ("y = t.size(0, 1)", "y = t.shape[0, 1]"),
    ("y = type(u).m(t)", "y = t.m()"),
])
def test_the_normal_form_keeps_what_differs(one, other):
    one, other = normal_forms("def go(a, b, f, g, t, u, xs, y):\n", one, other)
    assert one != other


def test_a_name_bound_once_to_a_constant_is_folded_for_the_padding_and_dead_code_tests():
    code = '''
import time
import torch
import torch.distributed as dist
_NAP = 0
_TWICE = _NAP * 2
_OFF = not 1
_BUSY = 0


def step(t, group):
    time.sleep(_NAP)
    dist.all_reduce(t, group=group)
    time.sleep(_TWICE + 1)
    torch.manual_seed(_NAP)
    if _OFF:
        t.zero_()
    time.sleep(_BUSY)
    time.sleep(t.numel())
    return t


def slow():
    global _BUSY
    _BUSY = 1
'''
    text = normalize(code)
    for gone in ("sleep(_NAP", "sleep(_TWICE", "_OFF:", "manual_seed", "zero_"):
        assert gone not in text, (gone, text)
    for kept in ("dist.all_reduce(t, group=group)", "time.sleep(_BUSY)", "time.sleep(t.numel())"):
        assert kept in text, (kept, text)


def test_operator_functions_are_spelled_as_operators():
    code = "import operator as _op\nfrom operator import getitem\ndef f(a, b):\n    return _op.mul(a, getitem(b, 0))\n"
    assert normalize(code).endswith("return a * b[0]")


class _Rewrite(ast.NodeTransformer):
    """The fourth red team's mechanical rewrites of a whole file: `f(a, b)` as `f(*(a, b))`,
    `x.m()` as `torch.Tensor.m(x)`, parameters and returns annotated, a comprehension as
    `list(map(lambda ...))`, two assignments as one of tuples."""

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.attr in ("contiguous", "clone"):
            return ast.Call(ast.parse(f"torch.Tensor.{f.attr}", mode="eval").body, [f.value, *node.args],
                            node.keywords)
        if len(node.args) > 1 and not any(isinstance(a, ast.Starred) for a in node.args):
            node.args = [ast.Starred(ast.Tuple(node.args, ast.Load()), ast.Load())]
        return node

    def visit_arg(self, node):
        node.annotation = ast.Name("object", ast.Load())
        return node

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        node.returns = ast.Name("object", ast.Load())
        return node

    def visit_Lambda(self, node):               # a lambda's parameters take no annotation
        self.generic_visit(node)
        for a in node.args.args:
            a.annotation = None
        return node

    def visit_ListComp(self, node):
        self.generic_visit(node)
        gen = node.generators[0]
        if len(node.generators) == 1 and not gen.ifs and isinstance(gen.target, ast.Name):
            fn = ast.Lambda(ast.arguments([], [ast.arg(gen.target.id)], None, [], [], None, []), node.elt)
            return ast.Call(ast.Name("list", ast.Load()), [ast.Call(ast.Name("map", ast.Load()),
                                                                     [fn, gen.iter], [])], [])
        return node

    def generic_visit(self, node):
        super().generic_visit(node)
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            merged = []
            for st in body:
                last = merged[-1] if merged else None
                if isinstance(st, ast.Assign) and isinstance(last, ast.Assign) and len(st.targets) == 1 \
                        and len(last.targets) == 1 and all(isinstance(t, ast.Name) for t in
                                                           (st.targets[0], last.targets[0])) \
                        and last.targets[0].id not in {n.id for n in ast.walk(st.value)
                                                       if isinstance(n, ast.Name)}:
                    merged[-1] = ast.Assign([ast.Tuple([last.targets[0], st.targets[0]], ast.Store())],
                                            ast.Tuple([last.value, st.value], ast.Load()))
                else:
                    merged.append(st)
            node.body = merged
        return node


@pytest.mark.parametrize("exercise", EXERCISES)
def test_a_copy_rewritten_mechanically_is_a_near_copy(exercise):
    """The same program in other spellings: comm scored 0.122 (the range of independent
    work), rotation 0.358; the spellings are made one before the fingerprints."""
    ref, base = reference(exercise), stub(exercise)
    copy = ast.unparse(ast.fix_missing_locations(_Rewrite().visit(ast.parse(ref))))
    assert "*(" in copy and ": object" in copy
    assert similarity(fingerprints(ref, base), fingerprints(copy, base)) >= 0.85


# The ninth red team's scripts (rt9 A02-A04), written out again: each keeps what the module does.

def three_address(source):
    """Every call or operation nested in another expression hoisted into a temporary assigned
    just before its statement (`return f(g(x))` -> `_t1 = g(x); return f(_t1)`), as are an
    `if` test and a `for` iterable; lambdas, comprehensions, `and`/`or`, `a if c else b` left."""
    count = iter(range(1, 10 ** 6))
    opaque = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.IfExp, ast.BoolOp)

    def inner(e, out):
        if not isinstance(e, opaque):
            for field, value in ast.iter_fields(e):
                if isinstance(value, ast.expr):
                    setattr(e, field, hoist(value, out))
                elif isinstance(value, list):
                    for v in value:
                        if isinstance(v, ast.keyword):
                            v.value = hoist(v.value, out)
                    setattr(e, field, [hoist(v, out) if isinstance(v, ast.expr) else v for v in value])
        return e

    def hoist(e, out):
        e = inner(e, out)
        if isinstance(e, (ast.Call, ast.BinOp)) and not (isinstance(e.func, ast.Name) and e.func.id == "super"
                                                          if isinstance(e, ast.Call) else False):
            name = f"_t{next(count)}"
            out.append(ast.Assign([ast.Name(name, ast.Store())], e))
            return ast.Name(name, ast.Load())
        return e

    def block(stmts):
        new = []
        for st in stmts:
            out = []
            if isinstance(st, (ast.Return, ast.Expr, ast.Assign, ast.AugAssign)) and st.value is not None:
                st.value = inner(st.value, out)
            elif isinstance(st, ast.If):
                st.test = hoist(st.test, out)
            elif isinstance(st, ast.For):
                st.iter = hoist(st.iter, out)
            for field in ("body", "orelse", "finalbody"):
                if isinstance(getattr(st, field, None), list):
                    setattr(st, field, block(getattr(st, field)))
            for h in getattr(st, "handlers", ()):
                h.body = block(h.body)
            new += out + [st]
        return new
    tree = ast.parse(source)
    tree.body = block(tree.body)
    return ast.unparse(ast.fix_missing_locations(tree))


def control_flow(source):
    """`for v in range(a, b)` as `_n = b; v = a; while v < _n: ...; v += 1`, any other `for v in
    xs` as an index loop over `_L = list(xs)` (loops without break, continue or else); `if c: A
    else: B` as `if not c: B else: A` (`if c: A` as `if not c: pass else: A`); `a += b` as `a = a
    + b`; `return e` as `_r = e; return _r`."""
    count = iter(range(1, 10 ** 6))
    parse = lambda text: ast.parse(text).body  # noqa: E731

    class Rewrite(ast.NodeTransformer):
        def visit_For(self, node):
            self.generic_visit(node)
            if node.orelse or any(isinstance(x, (ast.Break, ast.Continue)) for x in ast.walk(node)):
                return node
            it, n = node.iter, next(count)
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" \
                    and isinstance(node.target, ast.Name) and len(it.args) <= 2 and not it.keywords:
                start, stop = (it.args[0], it.args[1]) if len(it.args) == 2 else (ast.Constant(0), it.args[0])
                v = node.target.id
                return [ast.Assign([ast.Name(f"_n{n}", ast.Store())], stop), ast.Assign([node.target], start),
                        ast.While(ast.parse(f"{v} < _n{n}", mode="eval").body, node.body + parse(f"{v} += 1"), [])]
            head = parse(f"_L{n} = list(xs)\n_i{n} = 0")
            head[0].value.args = [it]
            first = ast.Assign([node.target], ast.parse(f"_L{n}[_i{n}]", mode="eval").body)
            return head + [ast.While(ast.parse(f"_i{n} < len(_L{n})", mode="eval").body,
                                     [first, *node.body, *parse(f"_i{n} += 1")], [])]

        def visit_If(self, node):
            self.generic_visit(node)
            return ast.If(ast.UnaryOp(ast.Not(), node.test), node.orelse or [ast.Pass()], node.body)

        def visit_AugAssign(self, node):
            self.generic_visit(node)
            if isinstance(node.target, ast.Name):
                return ast.Assign([ast.Name(node.target.id, ast.Store())],
                                  ast.BinOp(ast.Name(node.target.id, ast.Load()), node.op, node.value))
            return node

        def visit_Return(self, node):
            if node.value is None:
                return node
            name = f"_r{next(count)}"
            return [ast.Assign([ast.Name(name, ast.Store())], self.visit(node.value)),
                    ast.Return(ast.Name(name, ast.Load()))]
    return ast.unparse(ast.fix_missing_locations(Rewrite().visit(ast.parse(source))))


def arithmetic_builtins(source):
    """`a + b` as `sum((a, b))`, `a - b` as `sum((a, -b))`, `a * b` as `math.prod((a, b))`, but
    where an operand may be a sequence (a string, list or tuple, a slice, a shape)."""
    def sequence(e):
        return isinstance(e, (ast.List, ast.Tuple, ast.JoinedStr, ast.ListComp)) \
            or isinstance(e, ast.Constant) and isinstance(e.value, str) \
            or isinstance(e, ast.Subscript) and isinstance(e.slice, ast.Slice) \
            or isinstance(e, ast.Attribute) and e.attr == "shape" \
            or isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in ("list", "tuple", "str") \
            or isinstance(e, ast.BinOp) and (sequence(e.left) or sequence(e.right))

    class Rewrite(ast.NodeTransformer):
        def visit_BinOp(self, node):
            self.generic_visit(node)
            if sequence(node.left) or sequence(node.right):
                return node
            pair = ast.Tuple([node.left, node.right], ast.Load())
            if isinstance(node.op, ast.Sub):
                pair.elts[1] = ast.UnaryOp(ast.USub(), node.right)
            func = {ast.Add: "sum", ast.Sub: "sum", ast.Mult: "math.prod"}.get(type(node.op))
            return node if func is None else ast.Call(ast.parse(func, mode="eval").body, [pair], [])
    return "import math\n" + ast.unparse(ast.fix_missing_locations(Rewrite().visit(ast.parse(source))))


RT9 = {"three-address code": three_address, "control flow": control_flow,
       "arithmetic through sum and math.prod": arithmetic_builtins,
       "control flow, then three-address code": lambda s: three_address(control_flow(s)),
       "all three": lambda s: arithmetic_builtins(three_address(control_flow(s)))}


@pytest.mark.parametrize("name", RT9)
@pytest.mark.parametrize("exercise", ["comm", "data_parallel", "sharding"])
def test_a_copy_made_by_the_ninth_red_teams_scripts_is_a_near_copy(exercise, name):
    """A02 (every nested call hoisted into a temporary) took the reference to 0.33-0.48 against
    itself, A03 (for as while, if/else inverted, `a = a + b`, a return through a temporary) to
    0.42-0.48, both at once to 0.22-0.49 on every exercise: full points and no near-copy row.
    Temporaries are inlined, counting loops are `for` loops again, and the spellings made one."""
    ref, base = reference(exercise), stub(exercise)
    copy = RT9[name](ref)
    assert copy != ref
    score = similarity(reference_prints(exercise), fingerprints(copy, base))
    assert score >= 0.9, (name, score)


def test_the_ninth_red_teams_rewrites_change_the_code():
    ref = reference("comm")
    assert "_t1 = " in three_address(ref) and "return _t" in three_address(ref)
    assert "while " in control_flow(reference("sharding")) and "if not " in control_flow(ref)
    assert "math.prod((" in arithmetic_builtins(ref)
    for make in RT9.values():
        ast.parse(make(reference("sharding")))


@pytest.mark.parametrize("one, other", [
    ("y = f(g(a), h(b) * c)", "_t1 = g(a)\n_t2 = h(b)\n_t3 = _t2 * c\ny = f(_t1, _t3)"),
    ("y, z = f(a), g(b)\nn = y - 1", "_t1 = f(a)\n_t2 = g(b)\ny, z = (_t1, _t2)\n_t3 = y - 1\nn = _t3"),
    ("t.x().y()", "_t1 = t.x()\n_t1.y()"),
    ("if f(a):\n    g(b)", "_t1 = f(a)\nif _t1:\n    g(b)"),
    ("for v in range(n):\n    g(v)", "_n1 = n\nv = 0\nwhile v < _n1:\n    g(v)\n    v += 1"),
    ("for v in range(a, n):\n    g(v)", "v = a\nwhile n > v:\n    g(v)\n    v = v + 1"),
    ("for v in xs:\n    g(v)", "_L = list(xs)\n_i = 0\nwhile _i < len(_L):\n    v = _L[_i]\n    g(v)\n    _i += 1"),
    ("if c:\n    g(a)\nelse:\n    g(b)", "if not c:\n    g(b)\nelse:\n    g(a)"),
    ("if c:\n    g(a)", "if not c:\n    pass\nelse:\n    g(a)"),
    ("y += b * c", "y = y + b * c"),
    ("y = a + b - c * d", "y = sum((sum((a, b)), -math.prod((c, d))))"),
])
def test_the_normal_form_undoes_temporaries_counting_loops_and_arithmetic_builtins(one, other):
    one, other = normal_forms("import math\n\n\ndef go(a, b, c, d, f, g, h, n, t, xs, y):\n", one, other)
    assert one == other, (one, other)


def test_a_temporary_is_inlined_only_into_the_statement_after_it():
    """Not past another statement (its calls would move past that one's), not into a `while`
    test, a lambda or a comprehension (where it would run more or less often)."""
    head = "def go(a, f, g, h, xs):\n"
    for code in ("    y = f(a)\n    g(a)\n    return h(y)\n", "    y = f(a)\n    while y:\n        g(a)\n",
                 "    y = f(a)\n    return [y + v for v in xs]\n", "    y = f(a)\n    return lambda: y\n"):
        assert "y = f(a)" in normalize(head + code), normalize(head + code)
    assert normalize(head + "    y = f(a)\n    return y\n").endswith("return f(a)")


def test_a_copy_padded_with_no_op_calls_is_flagged():
    """The red team's padding: `torch.is_grad_enabled()` and `torch.get_default_dtype()` before and
    after every statement of the comm reference scored 0.275 (a call through a module was not
    padding: it broke every k-gram) and was not flagged."""
    ref, base = reference("comm"), stub("comm")
    padded = pad_around(ref, lambda p: ["torch.is_grad_enabled()", "torch.get_default_dtype()"])
    assert similarity(fingerprints(ref, base), fingerprints(padded, base)) >= NEAR_COPY
    pairs = compare_class({"ann": {"comm": COMM}, "mallory": {"comm": padded}}, {"comm": ref}, {"comm": base})
    assert [(p.a, p.b) for p in pairs if p.near_copy] == [("mallory", "reference")]


def test_barriers_everywhere_do_not_make_honest_code_alike():
    """Two independent hands that both call `dist.barrier()` after every statement: the calls,
    the same in every file, once raised their score from 0.04 to 0.13 (and against the
    reference so padded from 0.14 to 0.22); set aside, they score as without (ROTATION_A 0.21
    against the reference: its `rotate` is the stub's hint, `rotate_async(...).wait()`, through
    a temporary, and its counting `while` the reference's `for k in range(1, world)`)."""
    base = stub("rotation")
    plain = similarity(fingerprints(ROTATION_A, base), fingerprints(ROTATION_B, base))
    a, b = (pad(code, "dist.barrier()") for code in (ROTATION_A, ROTATION_B))
    assert similarity(fingerprints(a, base), fingerprints(b, base)) <= plain + 0.01
    ref = fingerprints(pad(reference("rotation"), "dist.barrier()"), base)
    unpadded = fingerprints(reference("rotation"), base)
    for code, padded in ((ROTATION_A, a), (ROTATION_B, b)):
        alone = similarity(fingerprints(code, base), unpadded)
        assert similarity(fingerprints(padded, base), ref) <= alone + 0.01 and alone < 0.3


def test_the_normalisation_sets_aside_what_only_asks_and_keeps_what_takes_the_files_data():
    code = """
import os
import torch
import torch.distributed as dist


def step(t, group, works):
    torch.is_grad_enabled()
    os.getpid()
    t.shape
    len(t)
    torch.is_tensor(t)
    dist.get_rank(group)
    t.size(0)
    -t + 1
    dist.barrier()
    assert True
    _n = 0
    _n += 1
    _a, _b = t.shape
    del _a
    for _once in range(1):
        dist.all_reduce(t, group=group)
    if 1 == 1:
        t.add_(1)
    dist.barrier(group=group)
    for w in works:
        w.wait(t)
        w.wait()
    t.zero_()
    for _ in range(1):
        break
    print(t)
    yield t
"""
    text = normalize(code)
    for gone in ("is_grad_enabled", "getpid", "shape", "len(", "is_tensor", "get_rank", "size(", "-t",
                 "dist.barrier()", "assert", "_n", "_a", "_once", "1 == 1"):
        assert gone not in text, (gone, text)
    for kept in ("dist.all_reduce(t, group=group)", "t.add_(1)", "dist.barrier(group=group)", "w.wait(t)",
                 "w.wait()", "t.zero_()",
                 "for _ in range(1):\n        break", "yield t"):
        assert kept in text, (kept, text)


def correct_alternatives():
    for path in sorted((ROOT / "tests" / "correct").glob("*/*.py")):
        entry = {}
        exec(path.read_text(), entry)
        yield path, reference(path.parent.name, entry.get("BASE", ""))


def test_the_correct_alternatives_edits_of_the_reference_are_near_copies():
    """Each is the reference (or the simple design it edits) with a few edits: a near copy."""
    scores = {}
    for path, ref in correct_alternatives():
        base = stub(path.parent.name)
        scores[path.stem] = similarity(fingerprints(ref, base), fingerprints(wrongs.build(path), base))
    assert len(scores) >= 30
    assert min(scores.values()) >= NEAR_COPY + 0.1, sorted(scores.items(), key=lambda kv: kv[1])[:3]
    assert statistics.median(scores.values()) >= 0.85


def test_the_stub_is_not_a_near_copy_once_it_is_the_base():
    """Without the base the stub's signatures and imports are shared with the reference (groups:
    most of it); with it, a student who handed in the stub shares nothing."""
    unbased = [similarity(fingerprints(stub(ex)), fingerprints(reference(ex))) for ex in EXERCISES]
    assert max(unbased) >= 0.5
    refs = {ex: reference(ex) for ex in EXERCISES}
    stubs = {ex: stub(ex) for ex in EXERCISES}
    assert all(fingerprints(stub(ex), stub(ex)) == set() for ex in EXERCISES)
    pairs = compare_class({"idle": dict(stubs), "idle2": dict(stubs)}, refs, stubs)
    assert [p for p in pairs if p.near_copy] == [] and all(p.score == 0 for p in pairs)


# ---- independent implementations: the low end ---------------------------------------------------

ROTATION_A = '''
import torch
import torch.distributed as dist

DIRECTIONS = ("clockwise", "counterclockwise")


def ring_peers(direction="clockwise", group=None):
    if direction == "clockwise":
        offset = 1
    elif direction == "counterclockwise":
        offset = -1
    else:
        raise ValueError("direction should be one of clockwise, counterclockwise; not %r" % (direction,))
    n = dist.get_world_size(group)
    me = dist.get_rank(group)
    nxt, prv = (me + offset) % n, (me - offset) % n
    if group is not None:
        nxt = dist.get_global_rank(group, nxt)
        prv = dist.get_global_rank(group, prv)
    return nxt, prv


class RotationHandle:
    def __init__(self, works, received, sent):
        self.pending = list(works)
        self.buffer = received
        self.keep = sent

    def is_completed(self):
        for work in self.pending:
            if not work.is_completed():
                return False
        return True

    def wait(self):
        while self.pending:
            self.pending.pop().wait()
        self.keep = None
        return self.buffer


def rotate_async(tensor, direction="clockwise", group=None, recv_shape=None, recv_dtype=None):
    to, frm = ring_peers(direction, group)
    if dist.get_world_size(group) < 2:
        return RotationHandle([], tensor.clone(), None)
    shape = tensor.shape if recv_shape is None else recv_shape
    dtype = tensor.dtype if recv_dtype is None else recv_dtype
    inbox = tensor.new_empty(shape, dtype=dtype)
    outbox = tensor.contiguous()
    ops = [dist.P2POp(dist.irecv, inbox, frm, group), dist.P2POp(dist.isend, outbox, to, group)]
    return RotationHandle(dist.batch_isend_irecv(ops), inbox, outbox)


def rotate(tensor, direction="clockwise", group=None, recv_shape=None, recv_dtype=None):
    handle = rotate_async(tensor, direction, group, recv_shape, recv_dtype)
    return handle.wait()


def ring_all_gather(tensor, dim=0, group=None):
    n = dist.get_world_size(group)
    me = dist.get_rank(group)
    pieces = {me: tensor}
    moving = tensor
    step = 1
    while step < n:
        moving = rotate(moving, group=group)
        pieces[(me - step) % n] = moving
        step += 1
    return torch.cat([pieces[i] for i in range(n)], dim)


def ring_reduce_scatter(tensor, dim=0, group=None):
    n = dist.get_world_size(group)
    me = dist.get_rank(group)
    size = tensor.size(dim)
    if size % n != 0:
        raise ValueError("cannot split size %d along dim %d into %d equal chunks" % (size, dim, n))
    width = size // n

    def chunk(i):
        return tensor.narrow(dim, (i % n) * width, width)

    acc = chunk(me - 1).clone()
    for step in range(2, n + 1):
        acc = rotate(acc, group=group)
        acc += chunk(me - step)
    return acc
'''

ROTATION_B = '''
import torch
import torch.distributed as dist

DIRECTIONS = ("clockwise", "counterclockwise")


def _to_global(group, r):
    return r if group is None else dist.get_global_rank(group, r)


def ring_peers(direction="clockwise", group=None):
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown direction {direction}: use clockwise or counterclockwise")
    size = dist.get_world_size(group=group)
    rank = dist.get_rank(group=group)
    right = (rank + 1) % size
    left = (rank + size - 1) % size
    if direction == "clockwise":
        return _to_global(group, right), _to_global(group, left)
    return _to_global(group, left), _to_global(group, right)


class RotationHandle:
    def __init__(self, works, received, sent):
        self.state = {"works": works, "out": received, "sent": sent}

    def is_completed(self):
        return all(map(lambda w: w.is_completed(), self.state["works"]))

    def wait(self):
        works = self.state["works"]
        self.state["works"] = []
        for w in works:
            w.wait()
        self.state["sent"] = None
        return self.state["out"]


def rotate_async(tensor, direction="clockwise", group=None, recv_shape=None, recv_dtype=None):
    if dist.get_world_size(group=group) == 1:
        return RotationHandle([], tensor.detach().clone(), None)
    dst, src = ring_peers(direction, group)
    payload = tensor.detach().contiguous()
    result = torch.zeros(recv_shape or payload.shape, dtype=recv_dtype or payload.dtype,
                         device=payload.device)
    reqs = [dist.isend(payload, dst, group=group), dist.irecv(result, src, group=group)]
    return RotationHandle(reqs, result, payload)


def rotate(tensor, direction="clockwise", group=None, recv_shape=None, recv_dtype=None):
    return rotate_async(tensor, direction=direction, group=group, recv_shape=recv_shape,
                        recv_dtype=recv_dtype).wait()


def ring_all_gather(tensor, dim=0, group=None):
    size = dist.get_world_size(group=group)
    rank = dist.get_rank(group=group)
    held = [tensor.detach()]
    for _ in range(size - 1):
        held.append(rotate(held[-1], "clockwise", group))
    ordered = sorted(range(size), key=lambda k: (rank - k) % size)
    return torch.cat([held[k] for k in ordered], dim=dim)


def ring_reduce_scatter(tensor, dim=0, group=None):
    size = dist.get_world_size(group=group)
    rank = dist.get_rank(group=group)
    if tensor.shape[dim] % size:
        raise ValueError(f"dim {dim} has {tensor.shape[dim]} entries, not a multiple of {size}")
    parts = list(torch.split(tensor.detach(), tensor.shape[dim] // size, dim=dim))
    index = (rank - 1) % size
    total = parts[index].clone()
    for _ in range(size - 1):
        index = (index - 1) % size
        total = rotate(total, "clockwise", group).add_(parts[index])
    return total
'''

# The stub all but dictates this exercise: the closest an independent hand comes.
DATA_PARALLEL = '''
import torch
import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module, group=None) -> None:
    n = dist.get_world_size(group=group)
    for param in model.parameters():
        if param.grad is None:
            continue
        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM, group=group)
        param.grad.div_(n)


class DataParallel(nn.Module):
    def __init__(self, module: nn.Module, group=None):
        super().__init__()
        self.module = module
        self.group = group
        root = 0 if group is None else dist.get_global_rank(group, 0)
        with torch.no_grad():
            for t in [*module.parameters(), *module.buffers()]:
                dist.broadcast(t.data, root, group=group)
        self.n = dist.get_world_size(group=group)
        for param in module.parameters():
            if param.requires_grad:
                param.register_post_accumulate_grad_hook(self.hook)

    def hook(self, param):
        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM, group=self.group)
        param.grad.div_(self.n)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)
'''


# Two more independent hands, for the calibration of the normalised comparison (0.19 and 0.14).
COMM = '''
import torch
import torch.distributed as dist


def _size_rank(group):
    return dist.get_world_size(group=group), dist.get_rank(group=group)


def _gather_cat(t, dim, group):
    n, _ = _size_rank(group)
    t = t.contiguous()
    bufs = [torch.empty_like(t) for _ in range(n)]
    dist.all_gather(bufs, t, group=group)
    return torch.cat(bufs, dim=dim)


class Duplication(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group=None):
        ctx.group = group
        return x.clone()

    @staticmethod
    def backward(ctx, grad_output):
        summed = grad_output.clone()
        dist.all_reduce(summed, op=dist.ReduceOp.SUM, group=ctx.group)
        return summed, None


class AllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group=None):
        y = x.clone()
        dist.all_reduce(y, op=dist.ReduceOp.SUM, group=group)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, None


class AllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim=-1, group=None):
        n, r = _size_rank(group)
        ctx.save = (dim % x.dim(), r, x.size(dim))
        return _gather_cat(x, dim, group)

    @staticmethod
    def backward(ctx, grad_output):
        d, r, width = ctx.save
        piece = grad_output.narrow(d, r * width, width)
        return piece.contiguous(), None, None


class Split(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim=-1, group=None):
        n, r = _size_rank(group)
        total = x.size(dim)
        if total % n != 0:
            raise ValueError("cannot split dim %d of size %d over %d ranks" % (dim, total, n))
        ctx.dim = dim
        ctx.group = group
        width = total // n
        return x.narrow(dim, r * width, width).contiguous()

    @staticmethod
    def backward(ctx, grad_output):
        return _gather_cat(grad_output, ctx.dim, ctx.group), None, None


def duplicate(x, group=None):
    return Duplication.apply(x, group)


def all_reduce(x, group=None):
    return AllReduce.apply(x, group)


def all_gather(x, dim=-1, group=None):
    return AllGather.apply(x, dim, group)


def split(x, dim=-1, group=None):
    return Split.apply(x, dim, group)
'''

GROUPS = '''
from dataclasses import dataclass

import torch
import torch.distributed as dist

from . import data_parallel, tensor_parallel


@dataclass
class ParallelGroups:
    tp_group: dist.ProcessGroup
    dp_group: dist.ProcessGroup
    tp_size: int
    dp_size: int
    tp_rank: int
    dp_rank: int

    def __iter__(self):
        return iter((self.tp_group, self.dp_group))


def build_groups(tp_size):
    world = dist.get_world_size()
    if tp_size <= 0 or world % tp_size != 0:
        raise ValueError("tp_size=%d does not divide the world size %d" % (tp_size, world))
    replicas = world // tp_size
    rank = dist.get_rank()
    mine = {}
    for replica in range(replicas):
        members = list(range(replica * tp_size, (replica + 1) * tp_size))
        g = dist.new_group(members)
        if rank in members:
            mine["tp"] = g
    for shard in range(tp_size):
        members = list(range(shard, world, tp_size))
        g = dist.new_group(members)
        if rank in members:
            mine["dp"] = g
    return ParallelGroups(tp_group=mine["tp"], dp_group=mine["dp"], tp_size=tp_size,
                          dp_size=replicas, tp_rank=rank % tp_size, dp_rank=rank // tp_size)


def parallelize_2d(model, groups):
    tensor_parallel.parallelize_transformer(model, groups.tp_group)
    first = dist.get_process_group_ranks(groups.dp_group)[0]
    with torch.no_grad():
        for p in model.parameters():
            dist.broadcast(p.data, first, group=groups.dp_group)
        for b in model.buffers():
            dist.broadcast(b.data, first, group=groups.dp_group)
    return model


def sync_gradients(model, groups):
    n = dist.get_world_size(groups.dp_group)
    for p in model.parameters():
        if p.grad is None:
            continue
        dist.all_reduce(p.grad, group=groups.dp_group)
        p.grad.div_(n)


def train_step_2d(model, optimizer, loss_fn, inputs, targets, groups):
    optimizer.zero_grad(set_to_none=True)
    out = model(inputs)
    loss = loss_fn(out, targets)
    loss.backward()
    sync_gradients(model, groups)
    optimizer.step()
    return loss.detach()
'''


def test_independent_implementations_score_low():
    base = stub("rotation")
    ref = fingerprints(reference("rotation"), base)
    a, b = fingerprints(ROTATION_A, base), fingerprints(ROTATION_B, base)
    assert min(len(a), len(b)) > 100                   # each is a whole module's worth
    assert similarity(a, ref) < 0.3 and similarity(b, ref) < 0.3 and similarity(a, b) < 0.3
    dp = similarity(fingerprints(DATA_PARALLEL, stub("data_parallel")),
                    fingerprints(reference("data_parallel"), stub("data_parallel")))
    assert dp < 0.3
    pairs = compare_class({"ann": {"rotation": ROTATION_A}, "bob": {"rotation": ROTATION_B}},
                          {"rotation": reference("rotation")}, {"rotation": base})
    assert pairs and not any(p.near_copy for p in pairs)


# ---- the normalisation ---------------------------------------------------------------------------

def test_comments_docstrings_layout_and_aliases_do_not_change_the_tokens():
    one = '''
import torch.distributed as dist


def mean(t, group=None):
    """Average over ranks."""
    world = dist.get_world_size(group)   # how many
    dist.all_reduce(t, group=group)
    return (t / world, None)
'''
    two = '''
from torch.distributed import all_reduce, get_world_size
def average(x, g = None):
    # sum, then divide
    n = get_world_size(
        g,
    )
    all_reduce(x,
               group=g)
    return x / n, None
'''
    assert segments(one)[1:] == segments(two)[1:]           # all but the imports themselves
    assert "all_reduce" in tokens(one) and "mean" not in tokens(one) and "world" not in tokens(one)


def test_api_names_are_kept_and_own_attributes_are_not():
    t = tokens("class A:\n    def go(self, p):\n        self.total = p.grad\n        return self.go(p)\n")
    assert "grad" in t and "total" not in t and "go" not in t


def test_a_source_that_is_not_python_gives_fingerprints_not_an_error():
    assert isinstance(fingerprints("def f(:\n    return ((("), set)
    assert fingerprints("") == set() and similarity(set(), {1}) == 0.0


# ---- the class -----------------------------------------------------------------------------------

def test_compare_class_finds_students_who_copied_each_other():
    base = stub("rotation")
    carol = disguise(ROTATION_A)            # copied from ann, not from the reference
    pairs = compare_class({"ann": {"rotation": ROTATION_A}, "bob": {"rotation": ROTATION_B},
                           "carol": {"rotation": carol}},
                          {"rotation": reference("rotation")}, {"rotation": base}, top=3)
    assert len(pairs) == 3
    assert (pairs[0].a, pairs[0].b, pairs[0].near_copy) == ("ann", "carol", True)
    assert [p.score for p in pairs] == sorted((p.score for p in pairs), reverse=True)
    assert all(0 <= p.score <= 1 for p in pairs) and sum(p.near_copy for p in pairs) == 1


def _with(base, **modules):
    """A whole submission: every module the stub, less what `modules` replaces."""
    return {**{ex: stub(ex) for ex in EXERCISES}, **base, **modules}


COMM_API = ("Duplication", "AllReduce", "AllGather", "Split", "duplicate", "all_reduce", "all_gather", "split")


def test_a_copy_parked_in_another_module_is_found_where_it_sits():
    """The red team's comm.py was one line, `from .sharding import Duplication, ...`, and
    sharding.py the stub with the reference comm.py pasted below it: comm 10/10 and no row, the
    review comparing each exercise's module with the same exercise's only. The copy is found
    in the module it sits in: imported (a relative import, or through rtp_course.<module>),
    or parked in a module the exercise does not even import; a classmate's copy likewise."""
    refs = {ex: reference(ex) for ex in EXERCISES}
    stubs = {ex: stub(ex) for ex in EXERCISES}
    comm = reference("comm")
    names = ", ".join(COMM_API)
    students = {
        "ann": _with(refs, comm=COMM),                       # honest, the rest the reference's
        "bob": _with(refs, comm=stub("comm"), rotation=ROTATION_B),
        "idle": dict(stubs),
        "mallory": _with({}, comm=f"from .sharding import {names}\n",
                         sharding=stub("sharding") + "\n\n" + disguise(comm)),
        "oscar": _with({}, comm=f"import rtp_course.groups as _g\n\n{names.replace(', ', ' = _g.')} = _g.split\n",
                       groups=disguise(comm) + "\n\n" + stub("groups")),
        "pat": _with({}, comm=f"from rtp_course.rotation import *  # noqa\n",
                     rotation=stub("rotation") + "\n\n" + disguise(COMM)),     # ann's comm
        "quinn": _with(refs, comm=stub("comm"), flyweight=stub("flyweight") + "\n\n" + disguise(comm)),
    }
    pairs = compare_class(students, {"comm": comm}, stubs, top=100, exercises=["comm"])
    near = {(p.a, p.b): p.where for p in pairs if p.near_copy}
    assert near[("mallory", "reference")] == "comm.py with sharding.py, which it imports", near
    assert near[("oscar", "reference")].startswith("comm.py with ") and "groups.py" in near[("oscar", "reference")]
    assert near[("pat", "ann")] == "comm.py with rotation.py, which it imports", near
    assert near[("quinn", "reference")] == "flyweight.py", near                  # not imported at all
    assert {frozenset(pair) for pair in near} >= {frozenset(("mallory", "oscar")), frozenset(("oscar", "quinn"))}
    honest = {"ann", "bob", "idle", "reference"}
    assert not [pair for pair in near if set(pair) <= honest], near
    assert all(p.score >= 0.9 for p in pairs if p.near_copy and "reference" in (p.a, p.b)), pairs[:6]


def test_the_sibling_modules_a_module_imports_are_read_from_its_imports():
    assert similarity_imports("from .sharding import split\nfrom . import groups, rotation\n"
                              "import rtp_course.flyweight\nfrom rtp_course import comm\n"
                              "from rtp_course.context_parallel import *\nfrom .models import Bert\n"
                              "import torch.distributed\n") == \
        {"sharding", "groups", "rotation", "flyweight", "comm", "context_parallel"}
    assert similarity_imports("def f(:") == set() and similarity_imports(reference("comm")) == set()
    assert similarity_imports(stub("groups")) == {"data_parallel", "tensor_parallel"}


def similarity_imports(source):
    from rtp_course.instructor.review.similarity import imported
    return imported(source, EXERCISES)


def test_pair_rows():
    pair = Pair("ann", "reference", "comm", 0.91234, True)
    assert pair.as_row() == ["ann", "reference", "comm", "0.912", "yes"]
    assert len(Pair.HEADER) == len(pair.as_row())
