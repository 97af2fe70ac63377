"""The instructor's whole grading cycle, with a real nbgrader and this repository's nbgrader_config.py.

release (the student edition) -> scripts/make_nbgrader_source.py -> nbgrader generate_assignment
-> three students fill in the edition -> scripts/collect_submissions.py -> nbgrader autograde
-> nbgrader export, for the assignments that grade `data_parallel` (notebook 02) and `comm`
(notebook 03): the course notebooks when they are in nbgrader form, else the fixtures of
test_release.py. The students:

* alice hands in the reference solutions: full marks;
* bob's Duplication.backward does not all-reduce: loses comm points, keeps data_parallel's;
* carol's average_gradients skips the all-reduce on rank 0 (the others wait for ever):
  graded in bounded time, loses data_parallel points, keeps comm's.

The grade cells run at world size 2 only (patched into the test's copy of the hidden cells):
2 is the smallest world that communicates, every bug above shows there, and each extra
world size costs carol one more deadlock timeout. Real grading uses grade()'s defaults.
"""
import ast
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from test_release import instructor_copy, write_fixture_notebooks

# The module's first test also pays for the whole cycle (a module fixture): about 7 minutes on a busy
# 2-core machine, most of it the deadlocking submission's timeouts.
pytestmark = pytest.mark.timeout(1800)
ROOT = Path(__file__).resolve().parents[1]
WORLD_SIZES = (2,)
EXERCISES = ("data_parallel", "comm")
GRADE_CALL = re.compile(r"""grade\(\s*(["'])(\w+)\1([^()]*(?:\([^()]*\)[^()]*)*)\)""")


def _graded_exercises(nb) -> dict:
    """{grade_id: exercise} of the cells that call grade(exercise, ...)."""
    out = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        m = GRADE_CALL.search(cell.source) if meta.get("grade") else None
        if m:
            out[meta["grade_id"]] = m.group(2)
    return out


def _real_notebooks() -> dict:
    """{exercise: notebook} for data_parallel and comm from notebooks/, or {} if not both graded."""
    found = {}
    for path in sorted((ROOT / "notebooks").glob("0[23]_*.ipynb")):
        for ex in _graded_exercises(nbformat.read(path, as_version=4)).values():
            found.setdefault(ex, path)
    return found if all(ex in found for ex in EXERCISES) else {}


def _with_world_sizes(source: str) -> str:
    def patch(m):
        kwargs = re.sub(r",\s*world_sizes\s*=\s*(\([^()]*\)|\[[^\]]*\]|None)", "", m.group(3))
        return f"grade({m.group(1)}{m.group(2)}{m.group(1)}{kwargs}, world_sizes={WORLD_SIZES})"
    return GRADE_CALL.sub(patch, source)


def _answered(student_nb: Path, source_nb: Path, dst: Path) -> None:
    """The student's notebook with every answer cell filled in as the source's solution."""
    solutions = {c.metadata["nbgrader"]["grade_id"]: c.source
                 for c in nbformat.read(source_nb, as_version=4).cells
                 if c.metadata.get("nbgrader", {}).get("solution")}
    nb = nbformat.read(student_nb, as_version=4)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution") and gid in solutions:
            cell.source = "\n".join(line for line in solutions[gid].splitlines()
                                    if not re.match(r"\s*### (BEGIN|END) SOLUTION", line))
    nbformat.write(nb, dst)


def _function(text: str, qualname: str) -> ast.FunctionDef:
    scope = ast.parse(text)
    for part in qualname.split("."):
        scope = next(n for n in ast.walk(scope) if isinstance(n, (ast.ClassDef, ast.FunctionDef))
                     and n.name == part)
    return scope


def _replace_body(text: str, qualname: str, new_body: str) -> str:
    """`text` with the body (docstring kept) of function `qualname` replaced by `new_body`."""
    fn = _function(text, qualname)
    first = fn.body[1] if ast.get_docstring(fn) is not None and len(fn.body) > 1 else fn.body[0]
    lines = text.splitlines()
    indent = " " * first.col_offset
    body = [indent + line for line in new_body.format(*[a.arg for a in fn.args.args]).splitlines()]
    return "\n".join(lines[:first.lineno - 1] + body + lines[fn.body[-1].end_lineno:]) + "\n"


BROKEN = {
    # bob: f's backward returns the local gradient (no all-reduce)
    "bob": ("comm.py", "Duplication.backward", "return {1}, None"),
    # carol: rank 0 leaves without joining the all-reduce the others are waiting in
    "carol": ("data_parallel.py", "average_gradients",
              "import torch.distributed as dist\n"
              "if dist.get_rank({1}) == 0:\n    return\n"
              "for p in {0}.parameters():\n    if p.grad is not None:\n"
              "        dist.all_reduce(p.grad, group={1})\n"
              "        p.grad /= dist.get_world_size({1})"),
}


def _nbgrader(course: Path, *args, timeout=1800) -> subprocess.CompletedProcess:
    env = dict(os.environ, RTP_COURSE_GRADING_DIR=str(course), OMP_NUM_THREADS="1")
    env.pop("RTP_COURSE_IMPL", None)
    r = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"nbgrader {' '.join(args)}:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    return r


def _script(name: str, course: Path, *args) -> str:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / name), "--course", str(course), *args],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def _leftovers(course: Path) -> list:
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if Path(p.cwd()).is_relative_to(course):
                found.append((p.pid, " ".join(p.info["cmdline"] or [])[:120]))
        except (psutil.Error, OSError):
            pass
    return found


@pytest.fixture(scope="module")
def cycle(tmp_path_factory):
    from rtp_course.release import build
    tmp = tmp_path_factory.mktemp("cycle")
    course, notebooks = tmp / "course", tmp / "source-notebooks"
    notebooks.mkdir()
    real = _real_notebooks()
    if real:  # the course's notebooks, their grade cells limited to WORLD_SIZES
        root = ROOT
        for path in sorted(set(real.values())):
            nb = nbformat.read(path, as_version=4)
            for cell in nb.cells:
                if cell.metadata.get("nbgrader", {}).get("grade"):
                    cell.source = _with_world_sizes(cell.source)
            nbformat.write(nb, notebooks / path.name)
    else:
        root = instructor_copy(tmp / "instructor")
        write_fixture_notebooks(notebooks, world_sizes=WORLD_SIZES)
    stems = sorted(p.stem for p in notebooks.glob("*.ipynb"))
    edition = build(tmp / "edition", root=root, log=lambda *a: None)

    _script("make_nbgrader_source.py", course, "--notebooks", str(notebooks), *stems)
    for a in stems:
        _nbgrader(course, "generate_assignment", a, "--force")

    subs = tmp / "submissions"
    for student in ("alice", "bob", "carol"):
        clone = subs / student
        shutil.copytree(edition, clone)   # the student's copy of the edition ...
        for a in stems:                    # ... with the answers and the modules filled in
            _answered(edition / "notebooks" / f"{a}.ipynb", notebooks / f"{a}.ipynb",
                      clone / "notebooks" / f"{a}.ipynb")
        for sol in (ROOT / "solutions").glob("*.py"):
            if sol.name != "__init__.py":
                shutil.copy2(sol, clone / "rtp_course" / sol.name)
        if student in BROKEN:
            name, qualname, body = BROKEN[student]
            path = clone / "rtp_course" / name
            path.write_text(_replace_body(path.read_text(), qualname, body))
    _script("collect_submissions.py", course, str(subs))

    seconds = {}
    for student in ("alice", "bob", "carol"):
        start = time.perf_counter()
        for a in stems:
            _nbgrader(course, "autograde", a, "--student", student)
        seconds[student] = time.perf_counter() - start
    _nbgrader(course, "export", "--to", str(tmp / "grades.csv"))
    with open(tmp / "grades.csv") as fh:
        rows = list(csv.DictReader(fh))
    print("\nautograde seconds per submission (world sizes %s): %s"
          % (WORLD_SIZES, json.dumps({k: round(v, 1) for k, v in seconds.items()})))
    return dict(course=course, stems=stems, notebooks=notebooks, rows=rows, seconds=seconds,
                cells=_cell_scores(course, stems), leftovers=_leftovers(course))


def _cell_scores(course: Path, stems) -> dict:
    """{student: {(assignment, grade_id): (score, max, exercise or None, outputs)}} from the autograded
    notebooks, scored as nbgrader scores them (nbgrader.utils.determine_grade)."""
    from nbgrader.utils import determine_grade
    out = {}
    for student_dir in sorted((course / "autograded").iterdir()):
        scores = out.setdefault(student_dir.name, {})
        for a in stems:
            for nb_path in (student_dir / a).glob("*.ipynb"):
                nb = nbformat.read(nb_path, as_version=4)
                exercises = _graded_exercises(nb)
                for cell in nb.cells:
                    meta = cell.metadata.get("nbgrader", {})
                    if meta.get("grade") and cell.cell_type == "code":
                        score, top = determine_grade(cell)
                        scores[(a, meta["grade_id"])] = (score, top, exercises.get(meta["grade_id"]),
                                                         cell.get("outputs", []))
    return out


def test_reference_solutions_score_full_marks(cycle):
    cells = cycle["cells"]["alice"]
    assert {ex for *_, ex, _ in cells.values()} >= set(EXERCISES)
    for key, (score, top, ex, outputs) in cells.items():
        assert score == top, f"{key} ({ex}): {score}/{top}\n{outputs}"
    rows = [r for r in cycle["rows"] if r["student_id"] == "alice"]
    assert len(rows) == len(cycle["stems"])
    assert all(float(r["score"]) == float(r["max_score"]) > 0 for r in rows), rows


@pytest.mark.parametrize("student, broken", [("bob", "comm"), ("carol", "data_parallel")])
def test_a_broken_exercise_loses_only_its_points(cycle, student, broken):
    ref, got = cycle["cells"]["alice"], cycle["cells"][student]
    assert got.keys() == ref.keys()
    for key, (score, top, ex, outputs) in got.items():
        if ex == broken:
            assert score < top, f"{student} keeps the {broken} points: {outputs}"
        else:
            assert score == ref[key][0], f"{student} lost points on {key} ({ex}): {outputs}"
    total = {r["assignment"]: float(r["score"]) for r in cycle["rows"] if r["student_id"] == student}
    full = {r["assignment"]: float(r["score"]) for r in cycle["rows"] if r["student_id"] == "alice"}
    lost = {a for a in full if total[a] < full[a]}
    assert len(lost) == 1, (total, full)


def test_deadlock_is_bounded_and_reported(cycle):
    carol = cycle["cells"]["carol"]
    text = "".join(o.get("text", "") for *_, ex, outs in carol.values() if ex == "data_parallel"
                   for o in outs)
    assert "HANG" in text and "deadlock" in text, text
    assert cycle["seconds"]["carol"] < 600, cycle["seconds"]


def test_grade_cells_write_no_stderr(cycle):
    """nbgrader gives 0 to a test cell with any stderr output: the workers' must not reach it."""
    for student, cells in cycle["cells"].items():
        for key, (*_, outputs) in cells.items():
            assert not [o for o in outputs if o.get("name") == "stderr"], (student, key, outputs)


def test_autograde_kept_the_students_modules(cycle):
    for a in cycle["stems"]:
        graded = cycle["course"] / "autograded" / "alice" / a / "rtp_course" / "comm.py"
        assert graded.read_text() == (ROOT / "solutions" / "comm.py").read_text()
        stub = cycle["course"] / "source" / a / "rtp_course" / "comm.py"
        assert stub.read_text() == (ROOT / "rtp_course" / "comm.py").read_text()


def test_no_process_left_behind(cycle):
    assert cycle["leftovers"] == []
