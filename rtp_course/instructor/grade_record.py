"""Where a submission's code points go: its reports, the autograded notebook's grading cells,
and nbgrader's gradebook, through nbgrader's own API.

Only the process that runs `rtp-course grade` (or its `--merge`) writes the gradebook, one
student at a time: it is SQLite, which takes one writer.
"""
from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from rtp_course.checker import report
from rtp_course.instructor import REPOSITORY
from rtp_course.instructor import grade_outcome

FEEDBACK_WIDTH = 92   # characters: nbgrader's feedback page shows outputs unwrapped


def checks_dir(course: Path, student: str, assignment: str) -> Path:
    return course / "checks" / student / assignment


def student_view(text: str, impl: Path) -> str:
    """Paths as the student knows them: their modules as rtp_course/<module>.py, torch's and
    the course's files by their place in the package, never the grader's directories."""
    import rtp_course
    text = text.replace(f"{impl}{os.sep}", f"rtp_course{os.sep}")
    text = text.replace(f"{Path(rtp_course.__file__).resolve().parent.parent}{os.sep}", "")
    text = re.sub(r"/[^\s\"']*/site-packages/", "", text)
    # the grader's own directories wherever they stand, glued to a word included ("x/root/..."):
    # their last part only
    for known in _graders_directories(impl):
        text = re.sub(re.escape(known) + r"(?:/[\w.@+-]+)*/([\w.@+-]+)", r"\1", text)
        text = re.sub(re.escape(known) + r"(?![\w.@+-])", "", text)
    # any other absolute path (a run directory, the grader's home): its last part only
    return re.sub(r"(?<![\w.~])/(?:[\w.@+-]+/)+([\w.@+-]+)", r"\1", text)


def _graders_directories(impl: Path) -> list[str]:
    """Python's, the temporary directory, the home, the course's checkout and the directories
    above the submission: longest first, each at least two levels deep."""
    import sys
    import tempfile
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, tempfile.gettempdir(),
             os.path.expanduser("~"), str(REPOSITORY), *map(str, Path(impl).resolve().parents),
             *map(str, Path(impl).parents)}
    return sorted((d for d in found if d.count("/") >= 2 or d in ("/tmp", "/root")),
                  key=len, reverse=True)


def report_header(grade: grade_outcome.CellGrade) -> str:
    """The first lines of an exercise's report, which the student reads beside the points."""
    if grade.points is None:
        return (f"{grade.exercise}: not graded yet ({grade.why}); your instructor grades it "
                f"again\n")
    text = f"{grade.exercise}: {grade.points:g} of {grade.max_points:g} points for your code\n"
    if grade.not_graded:
        text += (f"({grade.not_graded} of {grade.checks} checks could not be graded: the grading "
                 f"machine was too busy, or the time other checks took left none for them; "
                 f"these points count the other checks only)\n")
    return text


def write_reports(course: Path, assignment: str, student: str, grades: list, results: dict,
                  impl: Path) -> None:
    """checks/<student>/<assignment>/<exercise>.txt for each cell (the student's page), its
    .log (the instructor's: how the code ran confined, what the transport said, the ranks'
    stacks), and code.json."""
    out = checks_dir(course, student, assignment)
    out.mkdir(parents=True, exist_ok=True)
    for g in grades:
        body = ""
        if results.get(g.exercise):
            text = report.text(results[g.exercise], width=FEEDBACK_WIDTH, confinement=False)
            body = "\n" + student_view(text, impl) + "\n"
            (out / f"{g.exercise}.log").write_text(report.text(results[g.exercise], verbose=True))
        elif g.why and g.points is not None:
            body = f"{g.why}\n"
        (out / f"{g.exercise}.txt").write_text(report_header(g) + body)
    grade_outcome.write_status(out / grade_outcome.STATUS, student, assignment, grades)


def _own_notebook(path: Path, home: Path) -> bool:
    """A regular file inside the student's own autograded folder, reached through no link: what
    a student's kernel left there is never written through (a link to a source notebook, a
    classmate's)."""
    if path.is_symlink() or not path.is_file():
        return False
    return path.resolve().is_relative_to(home.resolve())


def write_feedback(course: Path, assignment: str, student: str, cells) -> None:
    """Put each exercise's report in its grading cell of the autograded notebook, where
    `nbgrader generate_feedback` shows it to the student beside the points."""
    import nbformat
    for notebook in {c.notebook for c in cells}:
        path = course / "autograded" / student / assignment / f"{notebook}.ipynb"
        if not _own_notebook(path, course / "autograded" / student):
            continue
        nb = nbformat.read(path, as_version=4)
        by_id = {c.grade_id: c for c in cells if c.notebook == notebook}
        for cell in nb.cells:
            graded = by_id.get(cell.metadata.get("nbgrader", {}).get("grade_id"))
            if graded is None or cell.cell_type != "code":
                continue
            report_file = checks_dir(course, student, assignment) / f"{graded.exercise}.txt"
            text = report_file.read_text() if report_file.exists() else ""
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
        mode = path.stat().st_mode      # nbgrader leaves it read-only (444), for a grader
        path.chmod(mode | 0o200)          # that is not root too
        nbformat.write(nb, path)
        path.chmod(mode)


def gradebook(course: Path):
    from nbgrader.api import Gradebook
    return Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="rtp-course")


def write_gradebook(course: Path, assignment: str, student: str, cells, points: dict) -> list[str]:
    """Set the grading cells' autograded scores (a cell whose points are None is left as it
    is), then the late penalty on the notebooks' new scores (instructor/late.py); return the
    cells the gradebook does not have."""
    from nbgrader.api import MissingEntry
    from rtp_course.instructor import late
    the_plugin = late.plugin(late.settings(str(REPOSITORY)))
    missing = []
    with gradebook(course) as gb:
        for cell in cells:
            try:
                grade = gb.find_grade(cell.grade_id, cell.notebook, assignment, student)
            except MissingEntry:
                missing.append(f"{student}/{assignment}/{cell.notebook}:{cell.grade_id}")
                continue
            if points.get(cell.grade_id) is not None:
                grade.auto_score = points[cell.grade_id]
        gb.db.commit()
        with contextlib.suppress(MissingEntry):
            late.apply(gb, assignment, student, the_plugin)
    return missing


def write_comments(course: Path, assignment: str, comments: dict) -> None:
    """{(student, notebook, grade_id): text}: the auto comment of each grading cell, which
    nbgrader keeps per cell and student (formgrader, the API). A grading cell is no solution
    cell, so nbgrader made no Comment for it: one is added. A non-empty text also flags the
    notebook for a human grader; an empty one clears only the comment."""
    from nbgrader.api import Comment, MissingEntry
    with gradebook(course) as gb:
        for (student, notebook, grade_id), text in sorted(comments.items()):
            try:
                nb = gb.find_submission_notebook(notebook, assignment, student)
                cell = gb.find_grade_cell(grade_id, notebook, assignment)
            except MissingEntry:
                continue
            comment = gb.db.query(Comment).filter(Comment.notebook_id == nb.id,
                                                  Comment.cell_id == cell.id).one_or_none()
            if comment is None and not text:
                continue
            if comment is None:
                comment = Comment(notebook=nb, cell=cell)
                gb.db.add(comment)
            comment.auto_comment = text or None
            nb.flagged = nb.flagged or bool(text)
        gb.db.commit()


def record(course: Path, assignment: str, student: str, cells, points: dict, log=print,
           grades: list | None = None) -> bool:
    """One student's points into the gradebook, the reports into the feedback, a line to `log`.
    `grades` (CellGrades) say what the points rest on; without them (a Slurm task's points)
    they are read from code.json. True when every cell is in the gradebook."""
    if grades is None:
        found = grade_outcome.read_status(checks_dir(course, student, assignment) / grade_outcome.STATUS)
        grades = [found[c.grade_id] if found and c.grade_id in found else
                  grade_outcome.CellGrade(c.grade_id, c.notebook, c.exercise, c.points,
                                          points.get(c.grade_id)) for c in cells]
    missing = write_gradebook(course, assignment, student, cells, points)
    write_feedback(course, assignment, student, cells)
    note = (f" (not in the gradebook, run `rtp-course autograde {assignment}` first: "
            f"{', '.join(missing)})") if missing else ""
    log(grade_outcome.line(student, assignment, grades) + note)
    return not missing
