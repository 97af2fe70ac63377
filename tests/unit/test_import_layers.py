"""The package's import graph, read with ast (imports inside functions count: they run too):
no cycle between modules, and each package imports only what DESIGN.md's layer table allows.

The table is read from DESIGN.md itself, so the document and the code cannot part: a new
package, or an import across a line the table does not draw, fails here with the modules
and the import that cross it."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "rtp_course"
TABLE_HEADING = "Which package imports which"

# Cycles still allowed, each the exact set of modules of one cycle: none.
KNOWN_CYCLES: set = set()


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """{dotted name: file} of every module of the package (a package by its __init__.py)."""
    found = {}
    for f in root.rglob("*.py"):
        parts = list(f.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = f
    return found


def _imported(node, name: str, is_package: bool) -> list[str]:
    """The absolute names an import statement of module `name` asks for."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:                                   # relative: from its own package upwards
        base = name.split(".") if is_package else name.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        origin = ".".join(base + ([node.module] if node.module else []))
    else:
        origin = node.module or ""
    # `from P import x`: x may be a submodule of P; _resolve falls back to P when it is not
    return [origin if a.name == "*" else f"{origin}.{a.name}" for a in node.names]


def graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """{module: the package's modules it imports}, anywhere in its file."""
    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges = {m: set() for m in mods}
    for m, f in mods.items():
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for name in _imported(node, m, f.name == "__init__.py"):
                    target = resolve(name) if name.startswith("rtp_course") else None
                    if target and target != m:
                        edges[m].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[frozenset]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.add(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def layer_of(module: str, exercises: set[str]) -> str:
    """The table's name for a module's package: its subpackage, `exercises` for an exercise
    module, `rtp_course` for the package's own __init__ (its docstring and version)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "rtp_course"
    return "exercises" if parts[1] in exercises else parts[1]


def design_layers(text: str) -> dict[str, set[str] | None]:
    """DESIGN.md's table: {package: the packages it may import}, None for "every package".
    A line is `package   a, b (a remark), c`; `-` for none."""
    block = text.split(TABLE_HEADING, 1)[1].split("\n\n")[1]
    table = {}
    for line in block.splitlines():
        name, _, allowed = line.strip().partition(" ")
        allowed = re.sub(r"\([^)]*\)", "", allowed).strip()
        if allowed.startswith("every package"):
            table[name] = None
        else:
            table[name] = {a.strip() for a in allowed.split(",") if a.strip() not in ("", "-")}
    return table


MODS = modules()
EDGES = graph(MODS)
EXERCISES = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
LAYERS = design_layers((ROOT / "DESIGN.md").read_text())


def crossings(edges, layers, exercises) -> list[str]:
    """Every import from one package into another that the table does not allow."""
    bad = []
    for m, targets in sorted(edges.items()):
        mine = layer_of(m, exercises)
        allowed = layers.get(mine, set())
        for t in sorted(targets):
            theirs = layer_of(t, exercises)
            if theirs in (mine, "rtp_course") or allowed is None or theirs in allowed:
                continue
            bad.append(f"{m} imports {t}: DESIGN.md lets {mine} import "
                       f"{', '.join(sorted(allowed)) or 'nothing of the course'}")
    return bad


def test_no_import_cycle_between_modules():
    found = set(cycles(EDGES))
    new = [sorted(c) for c in found - KNOWN_CYCLES]
    assert not new, "import cycles (each: modules that import each other, through functions " \
                    "too):\n  " + "\n  ".join(", ".join(c) for c in sorted(new))
    stale = [sorted(c) for c in KNOWN_CYCLES - found]
    assert not stale, f"no longer a cycle: remove it from KNOWN_CYCLES: {stale}"


def test_every_package_is_in_design_layer_table():
    packages = {layer_of(m, EXERCISES) for m in MODS} - {"rtp_course"}
    assert packages - set(LAYERS) == set(), "add these packages to DESIGN.md's table " \
                                            f"({TABLE_HEADING!r})"
    assert set(LAYERS) - packages == set(), "DESIGN.md's table names packages that do not exist"
    named = set().union(*(a for a in LAYERS.values() if a))
    assert named <= packages, f"the table allows imports of unknown packages: {named - packages}"


def test_packages_import_only_what_design_allows():
    bad = crossings(EDGES, LAYERS, EXERCISES)
    assert not bad, "imports across DESIGN.md's layers:\n  " + "\n  ".join(bad)


def test_the_checks_can_fail():
    """The graph and the checks see what they must: a cycle through a function's import, a
    relative import, and an import across a layer."""
    edges = {"rtp_course.a.x": {"rtp_course.a.y"}, "rtp_course.a.y": {"rtp_course.a.z"},
             "rtp_course.a.z": {"rtp_course.a.x"}, "rtp_course.b": set()}
    assert cycles(edges) == [frozenset({"rtp_course.a.x", "rtp_course.a.y", "rtp_course.a.z"})]
    assert crossings({"rtp_course.runtime.m": {"rtp_course.checker.n"}},
                     {"runtime": set(), "checker": {"runtime"}}, set())
    assert not crossings({"rtp_course.checker.n": {"rtp_course.runtime.m", "rtp_course"}},
                         {"runtime": set(), "checker": {"runtime"}}, set())
    tree = ast.parse("def f():\n    from ..checker import verdict\n")
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert _imported(node, "rtp_course.runtime.launcher", False) == ["rtp_course.checker.verdict"]
