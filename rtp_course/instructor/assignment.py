"""What an assignment holds for grading: the cells of its notebooks that call
grade(<exercise>), and where each student's submitted exercise modules lie.

Grading (grade_code.py, grade_slurm.py), the points table (points.py), the class's review
(review_class.py) and the term's commands (term.py) read an assignment through here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rtp_course.course import EXERCISES

GRADE_CALL = re.compile(r"""grade\(\s*["'](\w+)["']""")


@dataclass(frozen=True)
class GradedCell:
    notebook: str           # notebook name without .ipynb
    grade_id: str
    exercise: str
    points: float


def graded_cells(course: Path, assignment: str) -> list[GradedCell]:
    """The cells of the assignment's source notebooks that call grade(<exercise>)."""
    import nbformat
    cells = []
    for nb_path in sorted((course / "source" / assignment).glob("*.ipynb")):
        for cell in nbformat.read(nb_path, as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            m = GRADE_CALL.search(cell.source) if meta.get("grade") else None
            if m and m.group(1) in EXERCISES:
                cells.append(GradedCell(nb_path.stem, meta["grade_id"], m.group(1), float(meta["points"])))
    return cells


def impl_dir(course: Path, assignment: str, student: str) -> Path:
    return course / "submitted" / student / assignment / "rtp_course"
