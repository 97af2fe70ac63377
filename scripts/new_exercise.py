"""Start a new exercise: its row in the course table and the skeletons of its files.

    python scripts/new_exercise.py pipeline --id E9 --title "pipeline parallelism" \
        --notebook 11_pipeline --points 20 --task E9.1=forward_stage,send_activations \
        --task E9.2=Pipeline --requires E9.2=E9.1,E4.2

Writes (and refuses to overwrite): the course row (rtp_course/course/__init__.py), the stub
rtp_course/<module>.py, its reference solutions/<module>.py, its public checks
rtp_course/checker/public/<module>.py, its hidden checks tests/hidden/<module>.py, its notebook
scripts/notebook_src/<notebook>.py paired with notebooks/<notebook>.ipynb (jupytext), and one
whole wrong entry per rule every exercise holds (tests/wrong/<module>/: the first function
wrapped with the bug). The points table of docs/INSTRUCTORS.md, its count of assignments and
its total are written again from the course table. What is left to write by hand is marked
TODO(author): the stub's text, the reference, the checks' inputs and expected records, the
notebook's text, and two wrong entries or more of the exercise's own bugs; scripts/scaffold/toy/
holds those files of a worked example (E0, six files). The tests that hold each part print at
the end.
"""
from __future__ import annotations

import argparse
import importlib
import re
import string
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = Path(__file__).resolve().parent / "scaffold"
TABLE = ROOT / "rtp_course" / "course" / "__init__.py"
INSTRUCTORS = ROOT / "docs" / "INSTRUCTORS.md"
# The rules every exercise holds (rules.py: EVERY), each proved by a wrong entry of this class
# that the scaffold writes whole: the first function wrapped, `before` run ahead of it (x its
# first floating-point tensor, group its process group), `after` applied to each tensor it
# returns; the report must say the messages named (rtp_course/course/messages.py).
EVERY_RULE_ENTRIES = {
    "Results": dict(cls="values", stem="results_wrong", says="value.scaled",
                    bug="{name}'s results doubled on every rank (a scale applied twice).",
                    before="", after="lambda t: t * 2"),
    "Communication": dict(cls="traffic", stem="communication_extra", expect="rule 'Communication'",
                          bug="{name} all-reduces a scalar the rules do not list, first.",
                          before="dist.all_reduce(torch.zeros(1, dtype=x.dtype, device=x.device), "
                                 "group=group)", after=""),
    "Device": dict(cls="device", stem="buffer_without_device", says="exception.device",
                   bug="{name} communicates a tensor made without device=: host memory on a GPU.",
                   before="dist.all_reduce(torch.zeros(1, dtype=x.dtype), group=group)", after=""),
    "Dtypes": dict(cls="dtype", stem="buffer_in_float32", says="value.dtypes",
                   bug="{name} returns its results in the default float32, not in x's dtype.",
                   before="", after="lambda t: t.float()"),
}


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("module", help="the exercise's module name: rtp_course/<module>.py")
    p.add_argument("--id", required=True, help="E9")
    p.add_argument("--title", required=True)
    p.add_argument("--notebook", required=True, help="11_pipeline (notebooks/<notebook>.ipynb)")
    p.add_argument("--points", type=int, required=True)
    p.add_argument("--task", action="append", required=True, metavar="E9.1=name,name",
                   help="a task and the functions/classes it covers, in section order")
    p.add_argument("--requires", action="append", default=[], metavar="E9.2=E9.1,E4.2",
                   help="the tasks whose functions a task's functions call")
    p.add_argument("--world-sizes", default="1,2,3,4")
    p.add_argument("--no-train", action="store_true", help="its checks take no optimizer step")
    args = p.parse_args(argv)
    if not re.fullmatch(r"[a-z][a-z0-9_]*", args.module):
        p.error("the module is a Python name in lower case: pipeline, expert_parallel")
    if not re.fullmatch(r"E\d+", args.id):
        p.error("--id is E and a number: E9")
    if not re.fullmatch(r"\d\d_[a-z0-9_]+", args.notebook):
        p.error("--notebook is two digits and a name: 11_pipeline")
    args.tasks = []
    for spec in args.task:
        tid, _, names = spec.partition("=")
        if not re.fullmatch(rf"{args.id}\.\d+", tid) or not names:
            p.error(f"--task {spec!r}: write {args.id}.1=function,Class")
        args.tasks.append((tid, tuple(n.strip() for n in names.split(",") if n.strip())))
    args.needs = {}
    for spec in args.requires:
        tid, _, ids = spec.partition("=")
        args.needs[tid] = tuple(i.strip() for i in ids.split(",") if i.strip())
    return args


def course_row(a) -> str:
    tasks = "".join(f"\n        Task({tid!r}, {names!r}, {i}"
                    + (f", {a.needs[tid]!r}" if tid in a.needs else "") + "),"
                    for i, (tid, names) in enumerate(a.tasks, 1))
    extra = ""
    if a.world_sizes != "1,2,3,4":
        extra += f", world_sizes=({a.world_sizes},)"
    if a.no_train:
        extra += ", trains=False"
    return (f"    Exercise({a.id!r}, {a.module!r}, {a.title!r}, {a.notebook!r}, {a.points}, ("
            f"{tasks}){extra}),\n")


def _function(name: str, tid: str, body: str) -> str:
    if name[:1].isupper():
        return (f"\n\nclass {name}(torch.nn.Module):\n    \"\"\"TODO(author): shapes, math, "
                f"Communication.\"\"\"\n\n    def __init__(self, module, group=None):\n"
                f"        super().__init__()\n        {body}\n")
    return (f"\n\ndef {name}(x, group=None):\n    \"\"\"TODO(author): shapes, math, "
            f"Communication.\"\"\"\n    {body}\n")


def stub_functions(a) -> str:
    return "".join(_function(n, tid, f"raise NotImplementedError(\"[{tid}] {n}: TODO(author): "
                                     f"what to do, step by step\")")
                   for tid, names in a.tasks for n in names)


def solution_functions(a) -> str:
    return "".join(_function(n, tid, f"raise NotImplementedError(\"TODO(author): {n}'s "
                                     f"reference\")")
                   for tid, names in a.tasks for n in names)


def checks(a) -> str:
    out = []
    for tid, names in a.tasks:
        name = names[0]
        out.append(f'''

class {name[:1].upper() + name[1:]}Check(Check):
    """TODO(author): what {name} is fed and what each rank records."""
    exercise, name = {a.module!r}, {name!r}

    def run(self, ctx):
        x = ctx.to(randn(1, 6, owner=ctx.rank))
        with ctx.phase({name!r}):
            out = ctx.impl.{a.module}.{name}(x, group=ctx.group)
        ctx.record("{name}/output", out)

    def expected(self, world_size):
        raise NotImplementedError("TODO(author): the serial computation of every rank's records")

    def comm_rules(self, world_size):
        return [CommRule({name!r}, "*", 0, "TODO(author): the communication {name} may do")]
''')
    return "".join(out)


def hidden(a) -> str:
    name = a.tasks[0][1][0]
    cls = name[:1].upper() + name[1:] + "Check"
    return (f"\n\nclass {cls[:-5]}Float32(pub.{cls}):\n    name, hidden, dtype = "
            f"{name + '_float32'!r}, True, \"float32\"\n\n"
            "    def expected(self, world_size):\n"
            "        \"\"\"The public check's records (serial torch in float64), in float32.\"\"\"\n"
            "        return {r: {k: v.float() if torch.is_tensor(v) and v.is_floating_point() else v\n"
            "                    for k, v in records.items()}\n"
            "                for r, records in super().expected(world_size).items()}\n")


def notebook_sections(a) -> str:
    return "".join(f"\n# %% [markdown]\n# ## {i}. Task {tid} · TODO(author): {', '.join(f'`{n}`' for n in names)}"
                   f"\n#\n# TODO(author): the idea, a figure, the math, the communication.\n"
                   for i, (tid, names) in enumerate(a.tasks, 1))


def course_wide_rules() -> str:
    sys.path.insert(0, str(ROOT))
    from rtp_course.course import rules
    return ", ".join(f"'{r.name}'" for r in rules._COURSE_WIDE if r.held_by is rules.EVERY)


def files(a) -> dict:
    fill = dict(ID=a.id, TITLE=a.title, TITLE_CAP=a.title[:1].upper() + a.title[1:],
                MODULE=a.module, NOTEBOOK=a.notebook, NUMBER=a.notebook[:2], POINTS=a.points,
                GRADE_ID=f"{a.id.lower()}_{a.module}", COURSE_WIDE=course_wide_rules(),
                CHECK_SECTION=len(a.tasks) + 1, GRADE_SECTION=len(a.tasks) + 2,
                TASK_LINES="\n".join(f"    {tid}  section {i}: " + ", ".join(f"`{n}`" for n in names)
                                     for i, (tid, names) in enumerate(a.tasks, 1)),
                FUNCTIONS=stub_functions(a), CHECKS=checks(a), HIDDEN=hidden(a),
                SECTIONS=notebook_sections(a))
    made = lambda tmpl, **more: string.Template((TEMPLATES / tmpl).read_text()).substitute(fill, **more)  # noqa: E731
    out = {f"rtp_course/{a.module}.py": made("stub.py.tmpl"),
           f"solutions/{a.module}.py": made("solution.py.tmpl", FUNCTIONS=solution_functions(a)),
           f"rtp_course/checker/public/{a.module}.py": made("check.py.tmpl"),
           f"tests/hidden/{a.module}.py": made("hidden.py.tmpl"),
           f"scripts/notebook_src/{a.notebook}.py": made("notebook.py.tmpl")}
    name = a.tasks[0][1][0]                       # the entries wrap the first task's first name
    for rule, e in EVERY_RULE_ENTRIES.items():
        said = f"SAYS: {e['says']}" if "says" in e else f"EXPECT: {e['expect']}"
        out[f"tests/wrong/{a.module}/{e['stem']}.py"] = made(
            "wrong.py.tmpl", RULE=rule, CLASS=e["cls"], NAME=name, EXPECT=said,
            BUG=e["bug"].format(name=name), WRAPPER=wrapper(name, e["before"], e["after"]))
    return out


def wrapper(name: str, before: str, after: str) -> str:
    """`name` redefined around the reference's: `before` run first, `after` on its results."""
    result = f"_each(out, {after})" if after else "out"
    if name[:1].isupper():                       # a module: its forward wrapped
        pre = (f"        x, group = _tensor(args), getattr(self, 'group', None)\n"
               f"        {before}\n" if before else "")
        return (f"\n_Reference = {name}\n\n\nclass {name}(_Reference):\n"
                f"    def forward(self, *args, **kwargs):\n{pre}"
                f"        out = super().forward(*args, **kwargs)\n        return {result}\n")
    pre = f"    x, group = _tensor(args), _group(args, kwargs)\n    {before}\n" if before else ""
    return (f"\n_reference = {name}\n\n\ndef {name}(*args, **kwargs):\n{pre}"
            f"    out = _reference(*args, **kwargs)\n    return {result}\n")


def add_row(a) -> None:
    text = TABLE.read_text()
    end = text.index("\n)\n", text.index("COURSE = ("))
    TABLE.write_text(text[:end + 1] + course_row(a) + text[end + 1:])


def points_table() -> str:
    """docs/INSTRUCTORS.md's table of assignments, from the course table."""
    from rtp_course import course
    rows = {q: f"| {q} | its quiz cells (nbgrader alone) | {p} |" for q, p in course.QUIZZES.items()}
    for e in course.COURSE:
        graded = "the checks of " + e.id if e is course.COURSE[0] else e.id
        rows[e.notebook] = f"| {e.notebook} | `grade(\"{e.module}\")`: {graded} | {e.points} |"
    total = sum(e.points for e in course.COURSE) + sum(course.QUIZZES.values())
    return "\n".join(["| assignment | graded by | points |", "| --- | --- | --- |",
                      *(rows[k] for k in sorted(rows)), f"| total | | {total} |"])


def write_points_table() -> None:
    """docs/INSTRUCTORS.md's table, its count of assignments and its course total, again."""
    from rtp_course import course
    text = INSTRUCTORS.read_text()
    start = text.index("| assignment | graded by | points |")
    end = text.index("\n\n", start)
    text = text[:start] + points_table() + text[end:]
    total = sum(e.points for e in course.COURSE) + sum(course.QUIZZES.values())
    text = re.sub(r"\d+ assignments, \d+ points in all",
                  f"{len(course.GRADED_NOTEBOOKS)} assignments, {total} points in all", text)
    text = re.sub(r"\| course total \| \d+ points \|", f"| course total | {total} points |", text)
    INSTRUCTORS.write_text(text)


def main(argv=None) -> int:
    a = parse(argv)
    made = files(a)
    there = [p for p in made if (ROOT / p).exists()] + \
        ([f"notebooks/{a.notebook}.ipynb"] if (ROOT / "notebooks" / f"{a.notebook}.ipynb").exists() else [])
    if there:
        sys.exit(f"new_exercise: these exist already, nothing written: {', '.join(there)}")
    from rtp_course import course
    if a.module in course.EXERCISES or any(e.id == a.id for e in course.COURSE):
        sys.exit(f"new_exercise: the course table has {a.module} or {a.id} already")
    add_row(a)
    for rel, text in made.items():
        (ROOT / rel).parent.mkdir(parents=True, exist_ok=True)
        (ROOT / rel).write_text(text)
    subprocess.run([sys.executable, "-m", "jupytext", "--quiet", "--to", "ipynb", "-o",
                    str(ROOT / "notebooks" / f"{a.notebook}.ipynb"),
                    str(ROOT / "scripts" / "notebook_src" / f"{a.notebook}.py")], check=True)
    importlib.reload(course)             # the table with its new row
    write_points_table()
    print(f"{a.id} `{a.module}`: written\n  " + "\n  ".join(
        [f"notebooks/{a.notebook}.ipynb", *made, "rtp_course/course/__init__.py (its row)",
         "docs/INSTRUCTORS.md (the points table)"]))
    print(CHECKLIST.format(m=a.module, nb=a.notebook))
    return 0


CHECKLIST = """
Now write every TODO(author) (grep -rn 'TODO(author)'), then prove it:
  rtp-course check {m} --impl solutions --hidden     the reference passes every check, 1-4 ranks
  rtp-course check {m}                               the stub: every check 'not implemented'
  pytest tests/test_rules_stated.py -k {m}           the Rules section, a wrong entry per rule cell
  pytest tests/test_wrong_implementations.py -k {m}  each wrong entry caught with its message
                                                     (at least 6 entries; tests/wrong/README.md)
  pytest tests/unit/test_scoped_entries.py -k {m}    each entry's EDITS name the reference's
                                                     definitions and build
  pytest tests/test_notebooks.py -k {nb}             the notebook's tasks, sections, check cells
  pytest tests/unit/test_docs_quote_the_code.py      the points table
The worked example of what is written by hand: scripts/scaffold/toy/ (tests/test_scaffold.py).
Own rules go in rtp_course/course/rules.py (a row, or this exercise's cell in a row), correct
alternatives in tests/correct/{m}/, a demo in rtp_course/notebook/demos/ if the notebook runs one.
"""

if __name__ == "__main__":
    sys.exit(main())
