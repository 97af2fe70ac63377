"""The course notebooks 04-08: well-formed nbgrader sources, and they run top to bottom.

Select with `pytest -m notebooks`. The same approach as tests/test_notebooks.py (00-03):

* structure (instant): no outputs, nbgrader metadata, one grading cell per exercise
  notebook with the right points, the stubs' "(notebook NN, section S)" hints and the
  demos' map of where each exercise function is taught point at existing sections;
* with RTP_COURSE_IMPL=solutions every demo runs, every check cell passes and every
  grading cell returns its full points;
* with the stubs (RTP_COURSE_IMPL unset), a lighter smoke run: the check and grading
  cells are left out (the checker's own tests cover stubs), every other cell runs, and
  the demos say what to implement, and where, instead of failing.
"""
import json
import os
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

pytestmark = pytest.mark.notebooks

from notebook_exec import (NOTEBOOK_DIR, ROOT, WALL_TIMES, assert_solution_cell_ok,  # noqa: E402
                           execute,
                           nbgrader_meta as _nbgrader, text_outputs as _text_outputs)

NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("0[4-8]_*.ipynb"))
GRADED = {"04_tensor_parallel": ("tensor_parallel", 20), "05_ring_rotation": ("rotation", 10),
          "06_flyweight_rtp": ("flyweight", 25), "08_2d_parallelism": ("groups", 15)}


def _headings(notebook: str) -> dict:
    nb = nbformat.read(NOTEBOOK_DIR / f"{notebook}.ipynb", as_version=4)
    return {m.group(1): m.group(2) for c in nb.cells if c.cell_type == "markdown"
            for m in re.finditer(r"^## (\d+)\. (.*)$", c.source, re.M)}


def _section_texts(notebook: str) -> dict:
    """{section number: its heading and the markdown up to the next numbered heading}."""
    nb = nbformat.read(NOTEBOOK_DIR / f"{notebook}.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    parts = re.split(r"^## (\d+)\. ", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


# ---- structure (fast) ----------------------------------------------------------------------


def test_all_five_notebooks_exist():
    assert [p.stem[:2] for p in NOTEBOOKS] == ["04", "05", "06", "07", "08"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, \
                f"{path.name}: cell {cell.id} has outputs; clear them before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_nbgrader_metadata(path):
    nb = nbformat.read(path, as_version=4)
    ids = [_nbgrader(c)["grade_id"] for c in nb.cells if _nbgrader(c)]
    assert len(ids) == len(set(ids)), f"duplicate grade_id in {path.name}: {ids}"
    for cell in nb.cells:
        meta = _nbgrader(cell)
        if not meta:
            continue
        assert meta["schema_version"] == 3 and meta["task"] is False
        assert meta["grade"] and meta["locked"] and meta["points"] > 0 and not meta["solution"]
        assert cell.metadata.get("editable") is False and cell.metadata.get("deletable") is False
        assert "### BEGIN HIDDEN TESTS" in cell.source and "### END HIDDEN TESTS" in cell.source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_grading_cell(path):
    nb = nbformat.read(path, as_version=4)
    graded = [c for c in nb.cells if _nbgrader(c).get("grade")]
    if path.stem not in GRADED:
        assert not graded, f"{path.name} is not graded"
        return
    exercise, points = GRADED[path.stem]
    assert len(graded) == 1
    cell = graded[0]
    assert _nbgrader(cell)["points"] == points
    body = cell.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
    assert "from rtp_course.grading import grade" in body
    assert body.strip().splitlines()[-1] == f'grade("{exercise}", points={points})'


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_check_cells_offer_slurm(path):
    """Every notebook with a check cell also shows how to run that check on Slurm."""
    sources = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    if any("report = check(" in s for s in sources):
        assert any("check_on_slurm" in s for s in sources), path.name


@pytest.mark.parametrize("module, notebook", [("tensor_parallel", "04_tensor_parallel"),
                                              ("groups", "08_2d_parallelism")])
def test_stub_hints_point_at_the_right_sections(module, notebook):
    """'(notebook 04, section 1)' in a stub: section 1 of notebook 04 is about the class or
    function whose docstring or NotImplementedError says it."""
    stub = (ROOT / "rtp_course" / f"{module}.py").read_text()
    headings = _headings(notebook)
    found = 0
    for block in re.split(r"\n(?=class |def )", stub):
        name = re.match(r"(?:class|def) (\w+)", block)
        for nb_number, section in re.findall(r"[Nn]otebook (\d+), section (\d+)", block):
            if name is None:
                continue
            found += 1
            assert notebook.startswith(nb_number), f"{module}.{name[1]} names notebook {nb_number}"
            assert section in headings, f"{notebook} has no section {section}"
            assert f"`{name[1]}`" in headings[section], \
                f"{module}.{name[1]} points at {notebook} section {section}: {headings[section]!r}"
    assert found, f"no section hints found in rtp_course/{module}.py"


def test_demo_hints_point_at_the_right_sections():
    """rtp_course.demos.todo.WHERE: each function is taught in the section it names (in its
    heading for notebooks 04-08, at least in its text for the others)."""
    from rtp_course.demos.todo import WHERE
    notebooks = {p.stem[:2]: p.stem for p in NOTEBOOK_DIR.glob("0*.ipynb")}
    for (exercise, name), (number, section) in WHERE.items():
        sections = _section_texts(notebooks[number])
        assert str(section) in sections, f"{notebooks[number]} has no section {section}"
        where = sections[str(section)]
        if number >= "04":
            found = f"`{name}`" in where.splitlines()[0]
        else:
            found = re.search(rf"`{name}\b", where) is not None
        assert found, \
            f"{exercise}.{name} -> {notebooks[number]} section {section}: {where[:200]!r}"


# ---- execution (slow) ----------------------------------------------------------------------


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_with_solutions(path, monkeypatch):
    nb = execute(path, "solutions", monkeypatch)
    for cell in nb.cells:
        text = assert_solution_cell_ok(path, cell)
        assert "skipped:" not in text and "failed:" not in text, \
            f"{path.name}, cell {cell.id}: a benchmark strategy did not run:\n{text}"
        if "report = check(" in cell.source:
            assert "PASS" in text, text
            for mark in ("FAIL", "TODO", "ERROR", "HANG"):
                assert f"  {mark}  " not in text, text


def _smoke(cell) -> bool:
    """Leave out the check and grading cells: they only run the checker on the stubs."""
    return not (_nbgrader(cell).get("grade") or "check(" in cell.source)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_with_stubs(path, monkeypatch):
    nb = execute(path, None, monkeypatch, keep=_smoke)
    texts = "".join(_text_outputs(c) for c in nb.cells)
    assert "[demo failed]" not in texts, texts
    if path.stem in GRADED:
        assert "[demo skipped]" in texts and "not implemented yet" in texts
        notebook = path.stem[:2]
        assert re.search(rf"implement \w+\.\w+ in rtp_course/\w+\.py first \(notebook {notebook}, "
                         rf"section \d+\)", texts), texts
    else:      # 07: the benchmark skips TP and RTP and says which exercise to implement
        assert "skipped: tp: implement" in texts and "skipped: rtp: implement" in texts, texts


def teardown_module(module):
    if WALL_TIMES:
        report = ", ".join(f"{k}: {v:.0f} s" for k, v in WALL_TIMES.items())
        print(f"\nnotebook wall times: {report}")
        out = os.environ.get("RTP_NOTEBOOK_TIMES")
        if out:
            path = Path(out)
            times = json.loads(path.read_text()) if path.exists() else {}
            path.write_text(json.dumps({**times, **WALL_TIMES}, indent=1))
