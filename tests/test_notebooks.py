"""The course notebooks, all by one rule: well-formed nbgrader sources that match the course
table, and they run top to bottom, with the reference solutions and with the stubs.

Select with `pytest -m notebooks`. Structure tests are instant; executing a notebook takes a
kernel and spawned ranks (tens of seconds each): the executions are in the extended tier
(`--extended`, which CI runs after the README's test command; the nbgrader cycle of the
default tier runs every grading cell), and marked slow (`-m "not slow"` skips them).

* with RTP_COURSE_IMPL=solutions every demo runs, every check cell passes and every
  grading cell returns the points of the course table;
* with the stubs (RTP_COURSE_IMPL unset) every cell but the grading cell runs: demos and
  check cells say what to implement, and the task and notebook section that teach it.
"""
import json
import os
import re
import time
from pathlib import Path

import pytest

from rtp_course.course import BY_MODULE, COURSE, QUIZZES

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
jupytext = pytest.importorskip("jupytext")

pytestmark = pytest.mark.notebooks

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
SOURCE_DIR = ROOT / "scripts" / "notebook_src"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
GRADED = {ex.notebook: ex for ex in COURSE}
CELL_TIMEOUT = 300
WALL_TIMES = {}


def _nbgrader(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
    return "".join(parts)


def _read(path):
    return nbformat.read(path, as_version=4)


def _sections(path) -> dict:
    """{section number: heading} of the notebook's '## N. ...' headings."""
    return {m.group(1): m.group(2) for c in _read(path).cells if c.cell_type == "markdown"
            for m in re.finditer(r"^## (\d+)\. (.*)$", c.source, re.M)}


def _grading_cells(nb):
    return [c for c in nb.cells if _nbgrader(c).get("grade")]


# ---- structure (fast) ----------------------------------------------------------------------


def test_every_exercise_has_its_notebook():
    assert {ex.notebook for ex in COURSE} <= {p.stem for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path):
    nb = _read(path)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, \
                f"{path.name}: cell {cell.id} has outputs; clear them before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_matches_its_jupytext_source(path):
    """notebooks/X.ipynb and scripts/notebook_src/X.py are a jupytext pair (jupytext.toml)."""
    source = SOURCE_DIR / f"{path.stem}.py"
    assert source.exists(), f"no source {source}: run jupytext --sync {path}"
    text, nb = jupytext.read(source), _read(path)

    def cells(notebook):
        return [(c.cell_type, c.source.strip(), _nbgrader(c)) for c in notebook.cells]
    assert cells(text) == cells(nb), f"{path.name} and its source differ: run jupytext --sync {path}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_nbgrader_metadata(path):
    nb = _read(path)
    ids = [_nbgrader(c)["grade_id"] for c in nb.cells if _nbgrader(c)]
    assert len(ids) == len(set(ids)), f"duplicate grade_id in {path.name}: {ids}"
    for cell in nb.cells:
        meta = _nbgrader(cell)
        if not meta:
            continue
        assert meta["schema_version"] == 3 and meta["task"] is False
        if meta["solution"]:
            assert "### BEGIN SOLUTION" in cell.source and "### END SOLUTION" in cell.source
            assert not meta["grade"] and not meta["locked"]
        else:
            assert meta["grade"] and meta["locked"] and meta["points"] > 0
            assert cell.metadata.get("editable") is False and cell.metadata.get("deletable") is False
        if "### BEGIN HIDDEN TESTS" in cell.source:
            assert "### END HIDDEN TESTS" in cell.source and meta["grade"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_grading_cell_matches_the_course_table(path):
    graded = _grading_cells(_read(path))
    if path.stem in QUIZZES:
        total = sum(_nbgrader(c)["points"] for c in graded)
        assert total == QUIZZES[path.stem], f"{path.name}: {total} points, the course table {QUIZZES[path.stem]}"
        return
    if path.stem not in GRADED:
        assert not graded, f"{path.name} is not a graded notebook of the course table"
        return
    ex = GRADED[path.stem]
    assert len(graded) == 1, f"{path.name}: one grading cell expected"
    cell = graded[0]
    assert _nbgrader(cell)["points"] == ex.points, \
        f"{path.name}: the grading cell gives {_nbgrader(cell)['points']} points, the course table {ex.points}"
    body = cell.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
    assert "from rtp_course.instructor.grading import grade" in body
    assert body.strip().splitlines()[-1] == f'grade("{ex.module}")', "grade(...) must be the last expression"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_check_cells_offer_slurm(path):
    """Every notebook with a check cell also shows how to run that check on Slurm."""
    sources = [c.source for c in _read(path).cells if c.cell_type == "code"]
    if any("report = check(" in s for s in sources):
        assert any("submit_check" in s or "check_on_slurm" in s for s in sources), path.name


@pytest.mark.parametrize("ex", COURSE, ids=lambda e: e.module)
def test_tasks_are_marked_in_stub_and_notebook(ex):
    """Task E2.1: its notebook section's heading names it, the stub lists it with that section,
    and every TODO of the stub is tagged with the task of the function it sits in."""
    import ast
    sections = _sections(NOTEBOOK_DIR / f"{ex.notebook}.ipynb")
    stub = (ROOT / "rtp_course" / f"{ex.module}.py").read_text()
    for task in ex.tasks:
        assert str(task.section) in sections, f"{ex.notebook} has no section {task.section}"
        assert sections[str(task.section)].startswith(f"Task {task.id} "), \
            f"{ex.notebook} section {task.section} should open with 'Task {task.id}'"
        assert re.search(rf"^\s+{re.escape(task.id)}  section {task.section}: ", stub, re.M), \
            f"rtp_course/{ex.module}.py does not list task {task.id} (section {task.section})"
    tree = ast.parse(stub)
    tagged = 0
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Raise) and "NotImplementedError" in ast.unparse(inner):
                message = ast.unparse(inner.exc)
                found = re.search(r"\[(E\d+\.\d+)\]", message)
                assert found, f"{ex.module}.{node.name}: TODO without a task tag: {message}"
                assert ex.task_of(node.name) and ex.task_of(node.name).id == found.group(1), \
                    f"{ex.module}.{node.name} is tagged {found.group(1)}"
                tagged += 1
    assert tagged, f"rtp_course/{ex.module}.py has no TODO"


# ---- execution (slow) ----------------------------------------------------------------------


def _execute(path: Path, impl, monkeypatch, workdir: Path, keep=lambda cell: True,
             edit=lambda cell: None):
    """Run the notebook top to bottom in `workdir` (what it writes, e.g. Slurm job logs or
    benchmark results, stays out of the repository)."""
    if impl is None:
        monkeypatch.delenv("RTP_COURSE_IMPL", raising=False)
    else:
        monkeypatch.setenv("RTP_COURSE_IMPL", impl)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # NCCL's rules on CPU: a demo that would fail on the first GPU run (a tensor made without
    # the rank's device, a non-contiguous send) fails here
    monkeypatch.setenv("RTP_COURSE_EMULATE", "nccl")
    nb = _read(path)
    nb.cells = [c for c in nb.cells if keep(c)]
    for cell in nb.cells:
        edit(cell)
    # a kernel starts in seconds; beside the suite's other workers it once took over nbclient's
    # default 60 s (run 28 of docs/PERFORMANCE.md)
    start = time.monotonic()
    for attempt in (1, 2):
        client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                                         startup_timeout=300,
                                         resources={"metadata": {"path": str(workdir)}})
        try:
            client.execute()
            break
        except RuntimeError as e:
            # jupyter_client picks the kernel's free ports before the kernel binds them: beside
            # the suite's other kernels one was taken in between (CI run 40, "Address already
            # in use"), and the kernel died before running any cell. Nothing ran: start again.
            if attempt == 2 or "Kernel died before replying" not in str(e):
                raise
    WALL_TIMES[f"{path.stem} ({impl or 'stubs'})"] = time.monotonic() - start
    return nb


def _at_two_ranks(cell):
    """A check cell's check(...) and a grading cell's grade(...) at world size 2 only: what is
    tested here is what the cell shows (a report, the course table's points); that the
    reference passes every public and hidden check at 1 to 4 ranks is test_checker's (a check
    cell at 1 to 4 ranks costs up to 12 CPU-s, a full hidden grade more)."""
    if "report = check(" in cell.source or _nbgrader(cell).get("grade"):
        cell.source = re.sub(r'^(report = check|grade)\(([^#\n]*)\)', r"\1(\2, world_sizes=(2,))",
                             cell.source, flags=re.M)


@pytest.mark.extended
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_with_solutions(path, monkeypatch, tmp_path):
    nb = _execute(path, "solutions", monkeypatch, tmp_path, edit=_at_two_ranks)
    for cell in nb.cells:
        text = _text(cell)
        assert "[demo skipped]" not in text and "[demo failed]" not in text, \
            f"{path.name}, cell {cell.id}: a demo did not run with the solutions:\n{text}"
        assert "skipped:" not in text and "failed:" not in text, \
            f"{path.name}, cell {cell.id}: a benchmark strategy did not run:\n{text}"
        if "report = check(" in cell.source:
            assert "PASS" in text, text
            for mark in ("FAIL", "TODO", "ERROR", "HANG"):
                assert f"  {mark}  " not in text, text
        if _nbgrader(cell).get("grade") and path.stem in GRADED:
            results = [o for o in cell.outputs if o.get("output_type") == "execute_result"]
            assert results, f"{path.name}: the grading cell returned nothing"
            score = float(results[-1]["data"]["text/plain"])
            assert score == GRADED[path.stem].points, f"{path.name}: graded {score}"
    if "write_trace(" in (SOURCE_DIR / f"{path.stem}.py").read_text():   # the Perfetto file
        traces = list(tmp_path.rglob("traces/*.json"))
        assert traces and all(json.loads(t.read_text())["traceEvents"] for t in traces), traces


def _runs_exercise_code(path) -> bool:
    return "rtp_course.course.impl" in (SOURCE_DIR / f"{path.stem}.py").read_text()


@pytest.mark.slow   # the student's first run of each notebook: 10-40 s each
@pytest.mark.extended
@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if _runs_exercise_code(p)], ids=lambda p: p.stem)
def test_runs_with_stubs(path, monkeypatch, tmp_path):
    nb = _execute(path, None, monkeypatch, tmp_path, keep=lambda c: not _nbgrader(c).get("grade"),
                  edit=_at_two_ranks)
    texts = "".join(_text(c) for c in nb.cells)
    assert "[demo failed]" not in texts and "Traceback" not in texts, texts
    ex = GRADED.get(path.stem)
    if ex is not None:
        assert "[demo skipped]" in texts and "not implemented yet" in texts, texts
        assert re.search(rf"\(task E\d+\.\d+, notebook {ex.notebook_number} section \d+\)", texts), texts
    elif path.stem.startswith("07"):   # the benchmark skips TP and RTP and says what to implement
        assert re.search(r"implement tensor_parallel\.\w+ in rtp_course/tensor_parallel.py", texts), texts
        assert re.search(r"implement flyweight\.\w+ in rtp_course/flyweight.py", texts), texts


def test_exercise_table_modules_exist():
    for module in BY_MODULE:
        assert (ROOT / "rtp_course" / f"{module}.py").exists()


def teardown_module(module):
    if WALL_TIMES:
        report = ", ".join(f"{k}: {v:.0f} s" for k, v in WALL_TIMES.items())
        print(f"\nnotebook wall times: {report}")
        out = os.environ.get("RTP_NOTEBOOK_TIMES")
        if out:
            Path(out).write_text(json.dumps(WALL_TIMES, indent=1))


def test_a_sequential_run_shows_no_transfer_under_compute(monkeypatch):
    """In the sequential loop a rotation starts after its compute ends and is waited for
    before the next compute starts: on an aligned timeline, no transfer lies under compute.
    (The regions come from the profiler, the transfers from perf_counter: a misaligned
    clock shifts one against the other.)"""
    from rtp_course.notebook import timeline
    from rtp_course.notebook.demos.rotation import overlap_run
    from rtp_course.notebook.timeline import Interval
    from rtp_course.runtime.launcher import launch
    monkeypatch.setenv("RTP_COURSE_IMPL", "solutions")
    out = launch(overlap_run, 2, results="objects", timeout=200)
    for rank, res in enumerate(out):
        iv = [Interval._make(i) for i in res["sequential"]["intervals"]]
        transfer = sum(i.end - i.start for i in iv if i.kind == "weight rotation")
        assert transfer > 0, iv
        assert timeline.overlap_time(iv) <= 0.05 * transfer, (rank, iv)


def test_shell_scripts_in_the_notebooks_start_with_a_shebang():
    """A jupytext round trip turns a markdown line '#!/bin/bash' into '!/bin/bash': the
    sbatch examples are indented code blocks, and start as a script does."""
    bad = [(p.name, line) for p in sorted((ROOT / "notebooks").glob("*.ipynb"))
           for line in p.read_text().splitlines() if "bin/bash" in line and "#!/bin/bash" not in line]
    assert bad == [], bad
