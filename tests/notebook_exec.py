"""Running the course notebooks in tests: one kernel per notebook, the implementation chosen
through $RTP_COURSE_IMPL, wall times collected for the report."""
import time
from pathlib import Path

import nbclient
import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
CELL_TIMEOUT = 300
WALL_TIMES = {}


def nbgrader_meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def text_outputs(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
    return "".join(parts)


def execute(path: Path, impl, monkeypatch, keep=lambda cell: True) -> nbformat.NotebookNode:
    """Run the notebook at `path` top to bottom (only the cells `keep` accepts)."""
    if impl is None:
        monkeypatch.delenv("RTP_COURSE_IMPL", raising=False)
    else:
        monkeypatch.setenv("RTP_COURSE_IMPL", impl)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.read(path, as_version=4)
    nb.cells = [c for c in nb.cells if keep(c)]
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    start = time.monotonic()
    client.execute()
    WALL_TIMES[f"{path.stem} ({impl or 'stubs'})"] = time.monotonic() - start
    return nb


def assert_solution_cell_ok(path: Path, cell) -> str:
    """With the reference solutions: no demo skipped or failed, a grading cell gives full points.
    Returns the cell's text output for further checks."""
    text = text_outputs(cell)
    assert "[demo skipped]" not in text and "[demo failed]" not in text, \
        f"{path.name}, cell {cell.id}: a demo did not run with the solutions:\n{text}"
    meta = nbgrader_meta(cell)
    if meta.get("grade") and "grade(" in cell.source:
        results = [o for o in cell.outputs if o.get("output_type") == "execute_result"]
        assert results, f"{path.name}: the grading cell returned nothing"
        score = float(results[-1]["data"]["text/plain"])
        assert score == meta["points"], f"{path.name}: {meta['grade_id']} gave {score}/{meta['points']}"
    return text
