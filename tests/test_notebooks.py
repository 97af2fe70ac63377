"""The course notebooks 00-03: well-formed nbgrader sources, and they run top to bottom.

Select with `pytest -m notebooks`. Executing a notebook takes a kernel and
spawned ranks (tens of seconds each); the structural tests are instant.

* with RTP_COURSE_IMPL=solutions every demo runs, every nbgrader test cell
  passes and every grading cell returns its full points;
* with the stubs (RTP_COURSE_IMPL unset) the exercise notebooks still run to
  the end: demos print what to implement, check cells report "not implemented yet".
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

pytestmark = pytest.mark.notebooks

from notebook_exec import (NOTEBOOK_DIR, ROOT, WALL_TIMES, assert_solution_cell_ok,  # noqa: E402
                           execute,
                           nbgrader_meta as _nbgrader, text_outputs as _text_outputs)

NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("0[0-3]_*.ipynb"))
EXERCISE_NOTEBOOKS = [p for p in NOTEBOOKS if p.name.startswith(("02_", "03_"))]


# ---- structure (fast) ----------------------------------------------------------------------


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, \
                f"{path.name}: cell {cell.id} has outputs; clear them before committing"


def test_notebooks_match_their_sources():
    """scripts/make_notebooks.py --check: the .ipynb files are rebuilt from scripts/notebook_src."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_notebooks.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


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
        if meta["solution"]:
            assert "### BEGIN SOLUTION" in cell.source and "### END SOLUTION" in cell.source
            assert not meta["grade"] and not meta["locked"]
        else:
            assert meta["grade"] and meta["locked"] and meta["points"] > 0
        if "### BEGIN HIDDEN TESTS" in cell.source:
            assert "### END HIDDEN TESTS" in cell.source and meta["grade"]


@pytest.mark.parametrize("exercise, path, points", [("data_parallel", "02_data_parallelism", 10),
                                                    ("comm", "03_tp_communication", 10)])
def test_grading_cell(exercise, path, points):
    nb = nbformat.read(NOTEBOOK_DIR / f"{path}.ipynb", as_version=4)
    graded = [c for c in nb.cells if _nbgrader(c).get("grade") and "grade(" in c.source]
    assert len(graded) == 1
    cell = graded[0]
    assert _nbgrader(cell)["points"] == points
    body = cell.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
    assert f'grade("{exercise}", points={points})' in body
    assert body.strip().splitlines()[-1].startswith("grade("), "grade(...) must be the last expression"


def test_stub_hints_point_at_the_right_sections():
    """The stubs say "notebook 02, section 3"; that section must be the one about that function."""
    for module, notebook in (("data_parallel", "02_data_parallelism"), ("comm", "03_tp_communication")):
        stub = (ROOT / "rtp_course" / f"{module}.py").read_text()
        nb = nbformat.read(NOTEBOOK_DIR / f"{notebook}.ipynb", as_version=4)
        headings = {m.group(1): m.group(2) for c in nb.cells if c.cell_type == "markdown"
                    for m in re.finditer(r"^## (\d+)\. (.*)$", c.source, re.M)}
        found = 0
        for m in re.finditer(r'NotImplementedError\(\s*"(\w+)', stub):
            tail = stub[m.end():].split("NotImplementedError")[0]
            where = re.search(r"\(notebook (\d+), section (\d+)\)", tail)
            if where is None:
                continue
            found += 1
            name, (nb_number, section) = m.group(1), where.groups()
            assert notebook.startswith(nb_number), f"{module}.{name}: hint names notebook {nb_number}"
            assert section in headings, f"{notebook} has no section {section}"
            assert f"`{name}`" in headings[section], \
                f"{module}.{name} points at {notebook} section {section}: {headings[section]!r}"
        assert found, f"no section hints found in rtp_course/{module}.py"


# ---- execution (slow) ----------------------------------------------------------------------


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_with_solutions(path, monkeypatch):
    nb = execute(path, "solutions", monkeypatch)
    for cell in nb.cells:
        text = assert_solution_cell_ok(path, cell)
        if "check(" in cell.source and "report = check" in cell.source:
            assert "FAIL" not in text and "TODO" not in text, text


@pytest.mark.parametrize("path", EXERCISE_NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_with_stubs(path, monkeypatch):
    nb = execute(path, None, monkeypatch)
    texts = "".join(_text_outputs(c) for c in nb.cells)
    assert "[demo skipped]" in texts and "not implemented yet" in texts
    assert "[demo failed]" not in texts


def teardown_module(module):
    if WALL_TIMES:
        report = ", ".join(f"{k}: {v:.0f} s" for k, v in WALL_TIMES.items())
        print(f"\nnotebook wall times: {report}")
        out = os.environ.get("RTP_NOTEBOOK_TIMES")
        if out:
            Path(out).write_text(json.dumps(WALL_TIMES, indent=1))
