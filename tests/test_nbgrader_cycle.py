"""The instructor's whole grading cycle, with a real nbgrader and this repository's nbgrader_config.py.

release (the student edition) -> scripts/make_nbgrader_source.py -> nbgrader generate_assignment
-> four students fill in the edition -> scripts/collect_submissions.py -> nbgrader autograde
-> rtp-course grade (the points for code, outside the notebooks) -> nbgrader export, for the
assignments that grade `data_parallel` (notebook 02) and `comm` (notebook 03): the course
notebooks when they are in nbgrader form, else the fixtures of test_release.py. The students:

* alice hands in the reference solutions: full marks;
* carol's average_gradients skips the all-reduce on rank 0 (the others wait for ever):
  graded in bounded time, loses data_parallel points, keeps comm's;
* mallory's Duplication.backward does not all-reduce, and a notebook cell patches grade() to
  award full points and tries to write the installed course: loses comm points (only what
  the code earns), keeps data_parallel's, and the write is refused;
* sam hands in the edition as released, stubs and all: 0 points, and grading goes on.

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
from test_safe_outputs import SCRIPT

# The module's first test also pays for the whole cycle (a session fixture): about 2 minutes on
# 2 cores, 2.5 in the full suite. Marked slow (conftest.py): `-m "not slow"` skips it.
pytestmark = [pytest.mark.timeout(1800), pytest.mark.slow]
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
    # mallory: f's backward returns the local gradient (no all-reduce)
    "mallory": ("comm.py", "Duplication.backward", "return {1}, None"),
    # carol: rank 0 leaves without joining the all-reduce the others are waiting in
    "carol": ("data_parallel.py", "average_gradients",
              "import torch.distributed as dist\n"
              "if dist.get_rank({1}) == 0:\n    return\n"
              "for p in {0}.parameters():\n    if p.grad is not None:\n"
              "        dist.all_reduce(p.grad, group={1})\n"
              "        p.grad /= dist.get_world_size({1})"),
}


SECRET = "ghp_not-for-students-0451"      # in the grader's environment


def _nbgrader(course: Path, *args, timeout=1800) -> subprocess.CompletedProcess:
    env = dict(os.environ, RTP_COURSE_GRADING_DIR=str(course), OMP_NUM_THREADS="1",
               GITHUB_TOKEN=SECRET)
    env.pop("RTP_COURSE_IMPL", None)
    r = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"nbgrader {' '.join(args)}:\n{_errors(r.stderr)}\n{r.stderr[-3000:]}"
    return r


def _errors(log: str) -> str:
    """nbgrader logs each student's traceback when it happens and only a summary at the end:
    the tracebacks, so that a failure says why."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if "Traceback" in line or "| ERROR]" in line]
    return "\n".join("\n".join(lines[i:i + 40]) for i in starts[:4])[-8000:]


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


@pytest.fixture(scope="session")  # one build per test process (conftest: SHARED_FIXTURES)
def cycle(tmp_path_factory):
    from rtp_course.instructor.release import build
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
    for student in STUDENTS:
        clone = subs / student
        shutil.copytree(edition, clone)   # the student's copy of the edition ...
        if student in STUBS:
            continue
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
        if student == "mallory":
            for a in stems:
                _patch_grade_in_notebook(clone / "notebooks" / f"{a}.ipynb")
    _script("collect_submissions.py", course, str(subs))
    _rtp_course(course, "seal")   # before any submission runs: `grade` verifies the grader against it

    seconds = {}
    for a in stems:     # every student in one nbgrader run
        start = time.perf_counter()
        _nbgrader(course, "autograde", a)
        seconds[f"autograde {a}, per student"] = (time.perf_counter() - start) / len(STUDENTS)
    start = time.perf_counter()
    # NCCL's rules on the checks' own tensors too: alice's full marks are then the reference's
    # proof at these world sizes (test_checker.py proves the others)
    graded = _rtp_course(course, "grade", *stems, "--jobs", "2",
                         "--world-size", *map(str, WORLD_SIZES), RTP_COURSE_EMULATE="nccl").stdout
    seconds["rtp-course grade, all"] = time.perf_counter() - start
    _nbgrader(course, "export", "--to", str(tmp / "grades.csv"))
    from rtp_course.instructor.grade_code import graded_cells
    comm_assignment = next(a for a in stems if any(c.exercise == "comm" for c in graded_cells(course, a)))
    start = time.perf_counter()
    _nbgrader(course, "generate_feedback", comm_assignment)
    seconds[f"generate_feedback {comm_assignment}"] = time.perf_counter() - start
    with open(tmp / "grades.csv") as fh:
        rows = list(csv.DictReader(fh))
    print("\nautograde seconds per submission (world sizes %s): %s"
          % (WORLD_SIZES, json.dumps({k: round(v, 1) for k, v in seconds.items()})))
    return dict(course=course, stems=stems, notebooks=notebooks, rows=rows, seconds=seconds,
                comm_assignment=comm_assignment,
                cells=_cell_scores(course, stems), outputs=_cell_outputs(course, stems),
                graded=graded, leftovers=_leftovers(course))


STUDENTS = ("alice", "carol", "mallory", "sam")
STUBS = ("sam",)


def _rtp_course(course: Path, *args, **more_env) -> subprocess.CompletedProcess:
    env = dict(os.environ, RTP_COURSE_GRADING_DIR=str(course), OMP_NUM_THREADS="1", **more_env)
    r = subprocess.run([sys.executable, "-m", "rtp_course.cli", *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, f"rtp-course {' '.join(args)}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def _patch_grade_in_notebook(path: Path) -> None:
    """A cell just before each grading cell that makes grade() award full points."""
    nb = nbformat.read(path, as_version=4)
    cheat = nbformat.v4.new_code_cell(
        # a script in the cell's output, for the feedback page to run
        f"from IPython.display import HTML, display\ndisplay(HTML({SCRIPT!r}))\n"
        "import pathlib, rtp_course\n"
        "import rtp_course.instructor.grading as _g\n"
        "from rtp_course.course import exercise as _ex\n"
        "_g.grade = lambda exercise, points=None, **kw: float(points or _ex(exercise).points)\n"
        "_target = pathlib.Path(rtp_course.__file__).parent / 'checker' / 'verdict.py'\n"
        "try:\n"
        "    open(_target, 'a').close()\n"
        "    print('WROTE the installed course')\n"
        "except OSError as e:\n"
        "    print('could not write the installed course:', e.strerror)\n"
        # the red team's: the grader's environment, file metadata, a link for nbgrader to
        # write through, a raw socket on the loopback where classmates' kernels talk
        "import os, socket\n"
        "print('ENVIRONMENT', sorted(os.environ), [v for v in os.environ.values() if 'ghp_' in v])\n"
        "if b'ghp_' in open('/proc/self/environ', 'rb').read():\n"
        "    print('PROC ENVIRON HOLDS A TOKEN')\n"
        "for _name, _try in (('chmod', lambda: os.chmod('.', 0o777)),\n"
        "                    ('symlink', lambda: os.symlink('/etc/passwd', 'link.ipynb')),\n"
        "                    ('raw socket', lambda: socket.socket(17, 3, 0)),\n"
        "                    ('fifo', lambda: os.mkfifo('n1.ipynb.fifo'))):\n"
        "    try:\n"
        "        _try()\n"
        "        print('DID', _name)\n"
        "    except OSError as e:\n"
        "        print('refused:', _name, e.strerror)")
    at = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade"))
    nb.cells.insert(at, cheat)
    nbformat.write(nb, path)


def _cell_scores(course: Path, stems) -> dict:
    """{student: {(assignment, grade_id): (score, max, exercise, [report])}} from the gradebook
    (what nbgrader export reports), with the checker's report that `rtp-course grade` wrote."""
    from nbgrader.api import Gradebook
    from rtp_course.instructor.grade_code import graded_cells
    out = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="rtp-course") as gb:
        for student in STUDENTS:
            scores = out.setdefault(student, {})
            for a in stems:
                for cell in graded_cells(course, a):
                    g = gb.find_grade(cell.grade_id, cell.notebook, a, student)
                    report = course / "checks" / student / a / f"{cell.exercise}.txt"
                    scores[(a, cell.grade_id)] = (g.score, g.max_score, cell.exercise,
                                                  [{"text": report.read_text()}])
    return out


def _cell_outputs(course: Path, stems) -> dict:
    """{student: {(assignment, grade_id): outputs}} of the graded cells of the autograded notebooks."""
    out = {}
    for student_dir in sorted((course / "autograded").iterdir()):
        for a in stems:
            for nb_path in (student_dir / a).glob("*.ipynb"):
                for cell in nbformat.read(nb_path, as_version=4).cells:
                    meta = cell.metadata.get("nbgrader", {})
                    if meta.get("grade") and cell.cell_type == "code":
                        out.setdefault(student_dir.name, {})[(a, meta["grade_id"])] = cell.get("outputs", [])
    return out


def test_reference_solutions_score_full_marks(cycle):
    cells = cycle["cells"]["alice"]
    assert {ex for *_, ex, _ in cells.values()} >= set(EXERCISES)
    for key, (score, top, ex, outputs) in cells.items():
        assert score == top, f"{key} ({ex}): {score}/{top}\n{outputs}"
    rows = [r for r in cycle["rows"] if r["student_id"] == "alice"]
    assert len(rows) == len(cycle["stems"])
    assert all(float(r["score"]) == float(r["max_score"]) > 0 for r in rows), rows


@pytest.mark.parametrize("student, broken", [("carol", "data_parallel"), ("mallory", "comm")])
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


def test_the_stubs_score_nothing(cycle):
    cells = cycle["cells"]["sam"]
    assert cells.keys() == cycle["cells"]["alice"].keys()
    for key, (score, top, ex, outputs) in cells.items():
        assert score == 0 < top, (key, outputs)
        assert "not implemented yet" in outputs[0]["text"], outputs
    assert all(float(r["score"]) == 0 for r in cycle["rows"] if r["student_id"] == "sam")


def test_deadlock_is_bounded_and_reported(cycle):
    carol = cycle["cells"]["carol"]
    text = "".join(o.get("text", "") for *_, ex, outs in carol.values() if ex == "data_parallel"
                   for o in outs)
    assert "HANG" in text and "deadlock" in text, text


def test_grade_cells_write_no_stderr(cycle):
    """nbgrader gives 0 to a test cell with any stderr output: the workers' must not reach it."""
    for student, cells in cycle["outputs"].items():
        for key, outputs in cells.items():
            assert not [o for o in outputs if o.get("name") == "stderr"], (student, key, outputs)


def test_grading_cells_show_the_report_of_the_code_graded_outside(cycle):
    """`rtp-course grade` puts each exercise's points and report in its grading cell (where the
    notebook's own grade() awarded nothing), so nbgrader's feedback shows them."""
    for student, cells in cycle["outputs"].items():
        for key, outputs in cells.items():
            text = "".join(o.get("text", "") for o in outputs)
            score, top, ex, _ = cycle["cells"][student][key]
            assert text.startswith(f"{ex}: {score:g} of {top:g} points for your code"), (student, key, text)


def test_feedback_shows_the_diagnosis_wrapped_and_without_the_graders_paths(cycle):
    from rtp_course.instructor.grade_code import FEEDBACK_WIDTH
    course = cycle["course"]
    pages = list((course / "feedback" / "mallory" / cycle["comm_assignment"]).glob("*.html"))
    assert pages, list((course / "feedback").rglob("*"))
    page = pages[0].read_text()
    assert "FAIL" in page and "comm.Duplication" in page and "points for your code" in page, page[-3000:]
    assert str(course) not in page and str(ROOT) not in page
    for student in STUDENTS:
        for report in (course / "checks" / student).rglob("*.txt"):
            text = report.read_text()
            assert str(course) not in text and str(ROOT) not in text, text
            assert max(map(len, text.splitlines())) <= FEEDBACK_WIDTH, text
            # the course's words: no confinement facts, no transport's addresses
            assert not re.search(r"Landlock|seccomp|\buid\b|\d+\.\d+\.\d+\.\d+\]?:\d+", text), text


def test_feedback_shows_no_script_of_a_students_output(cycle):
    """Mallory's cells display HTML with a script: the autograded notebook keeps only its
    text, and her feedback page shows no script (nbgrader_config.py: SafeOutputs)."""
    course, a = cycle["course"], cycle["comm_assignment"]
    page = next((course / "feedback" / "mallory" / a).glob("*.html")).read_text()
    assert "<script>" + SCRIPT[len("<script>"):] not in page
    for nb in (course / "autograded" / "mallory" / a).glob("*.ipynb"):
        outputs = [o for c in nbformat.read(nb, as_version=4).cells if c.cell_type == "code"
                   for o in c.get("outputs", [])]
        shown = [o.get("data", {}) for o in outputs if o.get("output_type") == "display_data"]
        assert shown and all(set(d) == {"text/plain"} for d in shown), shown


def test_notebook_cells_cannot_write_the_installed_course(cycle):
    """The autograde kernel is confined: mallory's cell could not open the course for writing,
    saw nothing of the grader's environment, and could change no file's mode, make no link
    (for nbgrader to write through) or FIFO (for it to block on) and open no raw socket."""
    import nbformat as nbf
    from rtp_course.confinement import landlock as sandbox
    if sandbox.abi_version() < 1:
        pytest.skip("this kernel offers no Landlock")
    texts = []
    for a in cycle["stems"]:
        for nb_path in (cycle["course"] / "autograded" / "mallory" / a).glob("*.ipynb"):
            for cell in nbf.read(nb_path, as_version=4).cells:
                texts += [o.get("text", "") for o in cell.get("outputs", [])]
    text = "".join(texts)
    assert "could not write the installed course: Permission denied" in text, text[-2000:]
    assert "WROTE" not in text
    assert "ENVIRONMENT" in text and SECRET not in text and "GITHUB_TOKEN" not in text, text
    assert "PROC ENVIRON HOLDS A TOKEN" not in text, text
    assert "DID" not in text, text[-2000:]
    for name in ("chmod", "symlink", "raw socket", "fifo"):
        assert f"refused: {name}" in text, text[-2000:]


def test_the_grader_is_unchanged_after_grading_everyone(cycle):
    """`rtp-course grade` verified the grader before grading; it is still intact after."""
    from rtp_course.instructor import manifest
    assert "grader differs" not in cycle["graded"]
    assert manifest.verify(cycle["course"]) > 50


def test_autograde_kept_the_students_modules(cycle):
    for a in cycle["stems"]:
        graded = cycle["course"] / "autograded" / "alice" / a / "rtp_course" / "comm.py"
        assert graded.read_text() == (ROOT / "solutions" / "comm.py").read_text()
        stub = cycle["course"] / "source" / a / "rtp_course" / "comm.py"
        assert stub.read_text() == (ROOT / "rtp_course" / "comm.py").read_text()


def test_no_process_left_behind(cycle):
    assert cycle["leftovers"] == []


def test_the_reference_notebooks_run_clean_in_the_grading_kernel(cycle):
    """Every cell of alice's notebooks (demos included) ran without an error in the confined
    kernel, whose temporary directory must stay short enough for multiprocessing's sockets."""
    for nb_path in sorted((cycle["course"] / "autograded" / "alice").rglob("*.ipynb")):
        for cell in nbformat.read(nb_path, as_version=4).cells:
            for out in cell.get("outputs", []):
                text = out.get("text", "") + " ".join(out.get("traceback", []))
                assert out.get("output_type") != "error" and "Traceback" not in text, (
                    nb_path.name, cell.source[:200], text[-2000:])
