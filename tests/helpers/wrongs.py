"""The collection of realistic wrong implementations in tests/wrong/<exercise>/<bug>.py.

Each file holds one bug as edits of the reference solution (solutions/<exercise>.py), or, with
`BASE = "simple"`, of the design the stub describes where the reference is a faster one
built on it (`simple_design`: solutions/flyweight.py up to its faster part), since a bug is
most realistic in what students write. The edits are scoped to names, so a refactoring of the
reference elsewhere keeps the entry applying: `EDITS`, a dict from the name of a top-level
function or class, or `Class.method` (`Name#1`: the first of a name defined twice), to a list
of (old, new) pairs, each `old` occurring exactly once in that definition's source (decorators
included) and replaced there (`scoped`). `ADD`, new top-level source appended at the module's
end, is the only way to define what the reference does not. What is no definition (an import,
a module constant) stays `REPLACE`, (old, new) pairs on the whole module applied after EDITS,
each `old` occurring exactly once. A key the reference does not define, or an `old` found 0
or 2+ times, fails the build naming the entry and the key, so a change of the solution that
breaks a bug is noticed. scripts/anchor_entries.py turns REPLACE entries into EDITS.

Its docstring's first line says the bug; `EXPECT: <regex>` is what the checker's report
must say (matched across lines: the check, the tensor, a cause's numbers); `SAYS: <id>;
...` the messages it must say, by id (`said`: the course's, rtp_course/course/messages.py,
and the checks' own hints, `<check id>:<hints key>`), so rewording a message breaks no
entry; `CLASS:` its bug classes (CLASSES below); `WORLD_SIZES: 2 3` the world sizes that
show it (run at the smallest first, at all only where that does not show the bug:
`caught`); the optional `ONLY: check_a check_b` limits the run to those checks (speed), and
`HIDDEN: yes` runs the hidden checks too (for a bug only they catch, as grading would).
`RULE: Name` says the entry breaks that rule of rtp_course/course/rules.py: it then proves
that rule's cell in its exercise, and runs in tests/test_rules_stated.py (with the checks
holding the cell) instead of tests/test_wrong_implementations.py.
"""
from __future__ import annotations

import ast
import functools
import re
import runpy
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WRONG = ROOT / "tests" / "wrong"
SOLUTIONS = ROOT / "solutions"


# Bug classes, and the exercises whose contract makes each one possible: the collection
# must hold at least one entry of each (tests/test_wrong_implementations.py).
CLASSES = {
    "values": ("wrong numbers (a sum for a mean, a wrong slice or order)", "*"),
    "forgotten-collective": ("a collective left out (an all-reduce in a backward)",
                             "comm context_parallel data_parallel flyweight groups sharding "
                             "tensor_parallel experts"),
    "deadlock": ("a hang: mismatched or missing communication",
                 "comm data_parallel groups pipeline rotation sharding experts"),
    "3-4-ranks": ("right with 1 or 2 ranks, wrong with 3 or 4",
                  "comm context_parallel data_parallel flyweight pipeline rotation sharding "
                  "tensor_parallel experts"),
    "subgroup": ("ignores the `group` it is given (world ranks, world size)",
                 "comm context_parallel data_parallel flyweight pipeline rotation sharding "
                 "tensor_parallel experts"),
    "uneven": ("a size the world size does not divide, where the contract allows it",
               "comm flyweight rotation sharding"),
    "traffic": ("more communication than the Rules allow", "*"),
    "memory": ("tensors held beyond the Memory rule",
               "context_parallel flyweight pipeline sharding tensor_parallel"),
    "overlap": ("waits where the Rules ask for overlap",
                "context_parallel flyweight rotation sharding"),
    "direction": ("a wrong rotation direction", "context_parallel flyweight rotation"),
    "off-by-one": ("an off-by-one ring or shard index",
                   "context_parallel flyweight pipeline rotation"),
    "buffers": ("module buffers (running statistics, a rank's own draw) left out",
                "data_parallel sharding"),
    "init": ("fresh layers initialised unlike the serial ones", "tensor_parallel"),
    "padding": ("padding_idx ignored", "tensor_parallel"),
    "bias-every-rank": ("a replicated bias added on every rank", "tensor_parallel"),
    "in-place": ("the caller's tensor changed in place", "comm context_parallel rotation experts"),
    "unwaited": ("a work never waited", "context_parallel pipeline rotation"),
    "dtype": ("a buffer in another dtype",
              "context_parallel data_parallel pipeline sharding experts"),
    "device": ("a tensor made without device= (in CPU memory on a GPU run)", "*"),
    # configurations real code meets (issue 37), in every exercise where each applies
    "view-shard": ("a shard that is a view of the full weight, which it keeps alive",
                   "flyweight tensor_parallel"),
    "batch-first": ("an attention that ignores the module's batch_first", "flyweight tensor_parallel"),
    "accumulation": ("a gradient assigned where autograd would add it",
                     "data_parallel flyweight sharding"),
    "frozen": ("a frozen parameter trained, or its missing gradient used",
               "data_parallel flyweight groups sharding tensor_parallel"),
    "per-call-state": ("per-call state kept on the class or module: two calls before one backward",
                       "comm context_parallel data_parallel flyweight sharding tensor_parallel experts"),
    "kept-output": ("an output buffer kept for the next call: an earlier output changes",
                    "comm context_parallel flyweight rotation tensor_parallel"),
    "non-consecutive": ("a group's ranks assumed consecutive",
                        "context_parallel data_parallel rotation"),
    "module-settings": ("a module's settings beyond the defaults ignored (dilation, padding mode, "
                        "unbatched input, attn_mask, recv_dtype)", "flyweight rotation tensor_parallel"),
    "pretrained": ("a pretrained weight re-initialised (a padding row zeroed)",
                   "flyweight tensor_parallel"),
    "one-rank-alias": ("with one rank, the input itself returned", "rotation"),
    "zero-data": ("a collective skipped where this rank's data are zero",
                  "comm data_parallel flyweight sharding experts"),
    "nested": ("a nested model's structure lost: an nn.ModuleList taken as one unit, a "
               "state-dict key without its submodule path", "sharding"),
    "hook-placement": ("a hook registered where torch refuses it or where it never fires "
                       "(before requires_grad_, on a module never called)", "sharding"),
    "wrong-group": ("an extra collective on another group than the one given, within the count",
                    "data_parallel groups"),
    "send-buffer": ("a send buffer written before its wait", "context_parallel flyweight rotation"),
    "contiguity": ("a non-contiguous tensor handed to communication", "comm rotation experts"),
}


def reference_and_stub_sources() -> dict:
    """{path from the repository's root: source} of every reference and every stub."""
    from rtp_course.course import EXERCISES
    files = sorted(SOLUTIONS.rglob("*.py")) + [ROOT / "rtp_course" / f"{e}.py" for e in EXERCISES]
    return {str(p.relative_to(ROOT)): p.read_text() for p in files}


def collect(exercise: str | None = None, rules: bool | None = None):
    """Wrong implementations of the exercises that have checks; `rules`: only those that prove
    a rule's cell (True), only the others (False), or all (None)."""
    from rtp_course.checker.registry import check_modules
    files = sorted(WRONG.glob(f"{exercise or '*'}/*.py"))
    found = [f for f in files if not f.name.startswith("_") and check_modules([f.parent.name], False)]
    return [f for f in found if rules is None or bool(spec(f)["rules"]) == rules]


def spec(path: Path) -> dict:
    text = path.read_text()
    doc = re.match(r'\s*r?"""(.*?)"""', text, re.S)
    assert doc, f"{path}: needs a module docstring"
    body = doc.group(1)
    expect = re.search(r"^EXPECT:\s*(.+)$", body, re.M)
    sizes = re.search(r"^WORLD_SIZES:\s*(.+)$", body, re.M)
    only = re.search(r"^ONLY:\s*(.+)$", body, re.M)
    classes = re.search(r"^CLASS:\s*(.+)$", body, re.M)
    requires = re.search(r"^REQUIRES:\s*(.+)$", body, re.M)
    rules = re.search(r"^RULE:\s*(.+)$", body, re.M)
    says = re.search(r"^SAYS:\s*(.+)$", body, re.M)
    return {"bug": body.strip().splitlines()[0],
            "classes": classes.group(1).split() if classes else [],
            "hidden": re.search(r"^HIDDEN:\s*yes\s*$", body, re.M) is not None,
            "expect": expect.group(1).strip() if expect else None,
            "says": [i.strip() for i in says.group(1).split(";")] if says else [],
            "world_sizes": [int(x) for x in sizes.group(1).split()] if sizes else [2, 3],
            "only": only.group(1).split() if only else None,
            # torch.distributed functions the entry calls that an older torch lacks
            "requires": requires.group(1).split() if requires else [],
            "rules": [r.strip() for r in rules.group(1).split(",")] if rules else []}


def said(report: str, exercise: str) -> set[str]:
    """The ids of the messages `report` says: the course's (rtp_course/course/messages.py)
    and its exercise's checks' own hints, `<check id>:<hints key>` (comm.AllGather:backward)."""
    from rtp_course.checker.registry import check_modules, hidden_dir, load_checks
    from rtp_course.course.messages import ids_in
    found, flat = ids_in(report), re.sub(r"\s+", " ", report)
    for check in load_checks(check_modules([exercise], hidden=hidden_dir() is not None)):
        found |= {f"{check.id}:{key}" for key, hint in check.hints.items()
                  if hint and re.sub(r"\s+", " ", hint) in flat}
    return found


def reports(path: Path, text: str) -> str:
    """Why the report `text` does not say what entry `path` expects ("" if it does): its
    EXPECT regex (the check, the tensor, the cause's numbers) and its SAYS messages, by id."""
    s = spec(path)
    if not (s["expect"] or s["says"]):
        return f"{path}: add an EXPECT: or a SAYS: line"
    if s["expect"] and not re.search(s["expect"], text, re.S):
        return f"caught, but the report does not say /{s['expect']}/:\n{text}"
    missing = set(s["says"]) - said(text, path.parent.name)
    if missing:
        return f"caught, but the report does not say {sorted(missing)}:\n{text}"
    return ""


def caught(path: Path, run, holds=lambda results: True) -> tuple[list, str]:
    """(results, report) of entry `path`'s checks, `run(world_sizes)` giving the results: at
    its smallest world size first, and at all of them only where that does not show the bug
    as the entry expects (`holds` too): a bug of 3 or 4 ranks. The same verdict, at less cost."""
    from rtp_course.checker import report
    sizes = spec(path)["world_sizes"]
    if len(sizes) > 1:
        results = run(sizes[:1])
        text = report.text(results)
        if not all(r.passed for r in results) and holds(results) and not reports(path, text):
            return results, text
    results = run(sizes)
    return results, report.text(results)


def missing_in_torch(path: Path) -> list:
    """The functions `path` REQUIRES that this torch.distributed does not have."""
    import torch.distributed as dist
    return [n for n in spec(path)["requires"] if not hasattr(dist, n)]


FASTER = "\n# ===== THE FASTER DESIGN"   # the line where a reference's faster design begins


def simple_design(exercise: str, solutions: Path = SOLUTIONS) -> str:
    """The stub's own design of `exercise`: its reference up to the faster design built on it
    (a complete exercise module), or the whole reference where there is only one design."""
    source = (solutions / f"{exercise}.py").read_text()
    return source[:source.index(FASTER)].rstrip() + "\n" if FASTER in source else source


def base_of(path: Path, solutions: Path = SOLUTIONS) -> tuple[str, str]:
    """The source an entry changes, and its name for messages."""
    exercise = path.parent.name
    if runpy.run_path(str(path)).get("BASE") == "simple":
        return (simple_design(exercise, solutions),
                f"the stub's design in solutions/{exercise}.py")
    return (solutions / f"{exercise}.py").read_text(), f"solutions/{exercise}.py"


def build(path: Path, solutions: Path = SOLUTIONS) -> str:
    """The source of the wrong module: the solution with the file's EDITS, then its REPLACE
    edits applied, then its ADD appended; it must compile."""
    entry = runpy.run_path(str(path))
    assert entry.keys() & {"EDITS", "REPLACE", "ADD"}, f"{path}: holds no EDITS, REPLACE or ADD"
    source, where = base_of(path, solutions)
    source = scoped(source, entry.get("EDITS", {}), f"{path}", where)
    source = replace(source, entry.get("REPLACE", []), f"{path}", where)
    if entry.get("ADD"):
        source = source.rstrip("\n") + "\n\n\n" + entry["ADD"].strip("\n") + "\n"
    compile(source, f"{path} built on {where}", "exec")
    return source


def replace(source: str, edits, who: str = "an entry", where: str = "the reference",
            key: str | None = None) -> str:
    """`source` with each (old, new) text edit applied; each `old` must occur exactly once."""
    for old, new in edits:
        n = source.count(old)
        assert n == 1, (f"{who}: an edit {f'of EDITS[{key!r}] ' if key else ''}no longer "
                        f"applies to {where} (its text occurs {n} times"
                        f"{f' in {key}' if key else ''}); update the bug:\n{old}")
        source = source.replace(old, new)
    return source


DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def first_line(node: ast.AST) -> int:
    """The first line of a definition, its decorators included."""
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])


def definition(tree: ast.Module, name: str):
    """The node of `name` (`f`, `Class`, `Class.method`) in `tree`, or None. Of a name defined
    more than once (solutions/flyweight.py's faster design redefines the simple one's classes),
    `name` is the last definition, the one in effect, and `name#1` the first."""
    body, node = tree.body, None
    for part in name.split("."):
        part, _, nth = part.partition("#")
        found = [n for n in body if isinstance(n, DEFINITIONS) and n.name == part]
        at = int(nth) if nth.isdigit() else 0 if nth else len(found)
        if not 1 <= at <= len(found):
            return None
        node = found[at - 1]
        body = node.body if isinstance(node, ast.ClassDef) else []
    return node


@functools.lru_cache(maxsize=32)
def _parsed(source: str) -> ast.Module:
    """The tree of a reference (read, never changed): the corpora build on a few sources."""
    return ast.parse(source)


def span(source: str, name: str) -> tuple[int, int] | None:
    """The character range of `name`'s definition in `source`: from the line of its first
    decorator to the end of its last line (its newline included); None where it is not defined."""
    node = definition(_parsed(source), name)
    if node is None:
        return None
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts[first_line(node) - 1], starts[node.end_lineno]


def scoped(source: str, edits: dict, who: str = "an entry", where: str = "the reference") -> str:
    """`source` with EDITS applied: each key's (old, new) pairs inside that definition's span
    alone, each `old` occurring there exactly once; the rest of `source` is kept."""
    spans = []
    for key, pairs in edits.items():
        at = span(source, key)
        assert at is not None, (f"{who}: EDITS names {key!r}, which {where} does not define (as "
                                f"a function, class or Class.method); update the entry")
        spans.append((*at, key, pairs))
    spans.sort()
    for (_, end, a, _), (start, _, b, _) in zip(spans, spans[1:]):
        assert end <= start, f"{who}: EDITS names both {a!r} and {b!r}, which overlap: merge them"
    for start, end, key, pairs in reversed(spans):
        source = source[:start] + replace(source[start:end], pairs, who, where, key) + source[end:]
    return source


def impl_with(path: Path, dest: Path) -> Path:
    """A copy of solutions/ whose `<exercise>.py` is replaced by the wrong module."""
    shutil.copytree(SOLUTIONS, dest, ignore=shutil.ignore_patterns("__pycache__"))
    (dest / f"{path.parent.name}.py").write_text(build(path))
    return dest


def tasks_touched(path: Path) -> list | None:
    """The ids of the tasks whose checks can judge an entry otherwise than the reference: the
    tasks covering the functions and classes its edits change, and every task that calls them
    (`course.requirements`). None (every check) where an edit changes what no task covers (a
    helper, an import, a constant) or nothing. The other checks run the reference's code,
    which tests/test_checker.py holds against every check."""
    from rtp_course import course
    exercise = course.BY_MODULE[path.parent.name]
    base = base_of(path)[0]
    old, new = _top_level(base), _top_level(build(path))
    changed = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
    tasks = {exercise.task_of(name) if isinstance(name, str) else None for name in changed}
    if not changed or None in tasks:
        return None
    ids = {t.id for t in tasks}
    return sorted(ids | {t.id for t in exercise.tasks if course.requirements(t.id) & ids})


def _top_level(source: str) -> dict:
    """{name of a top-level function or class, or (statement index,): its AST dump}."""
    out = {}
    for i, node in enumerate(ast.parse(source).body):
        name = getattr(node, "name", None)
        out[name if name else (i,)] = ast.dump(node)
    return out


# One function of the reference rotation.py broken at its top, the rest correct: what a
# hang or a loop in one function may cost (tests/test_one_function_hangs.py, a class's grades).
RS_BODY = '''    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if tensor.shape[dim] % world:
        raise ValueError(f"ring_reduce_scatter'''
SPINS = "    while True:\n        pass\n"
# A loop that sleeps and spins a little: each rank above the watchdog's IDLE, under its LOW.
NAPS = ("    import time\n"
        "    while True:\n"
        "        busy_until = time.perf_counter() + 0.004\n"
        "        while time.perf_counter() < busy_until:\n"
        "            pass\n"
        "        time.sleep(0.1)\n")
WAITS = ("    peer = (dist.get_rank(group) + 1) % dist.get_world_size(group)\n"
         "    dist.recv(tensor.new_empty(1), src=dist.get_global_rank(group, peer), group=group)\n")
# Slow, not hung: a sleep under the stall (at timeout_scale 0.25: 1.5 s) at each call.
SLEEPS = "    import time\n    time.sleep(1.0)\n"
# A hang whose status keeps moving: a receive posted every second, none ever completed.
WAITS_POSTING = ("    import time\n"
                 "    peer = (dist.get_rank(group) + 1) % dist.get_world_size(group)\n"
                 "    while True:\n"
                 "        dist.irecv(tensor.new_empty(1), src=dist.get_global_rank(group, peer),\n"
                 "                   group=group)\n"
                 "        time.sleep(1)\n")


def reduce_scatter_starting_with(first_lines: str) -> str:
    """The reference rotation.py with `first_lines` at the top of ring_reduce_scatter."""
    text = (SOLUTIONS / "rotation.py").read_text()
    assert text.count(RS_BODY) == 1
    return text.replace(RS_BODY, first_lines + RS_BODY)
