"""`rtp-course autograde ASSIGNMENT`: nbgrader's autograde of the notebooks, several students at once.

`nbgrader autograde` runs one notebook at a time, and its gradebook is SQLite: one writer,
which autograde keeps open while a notebook runs. So each student is autograded by an
`nbgrader autograde ASSIGNMENT --student X` of its own, which writes a private copy of the
gradebook (`--CourseDirectory.db_url`, a consistent copy made by SQLite's backup); when it
ends, this process copies what autograde wrote for that student into the gradebook, one
student at a time: the submission's timestamp, each grade's autograded score and whether it
needs a manual grade, each answer's automatic comment, each notebook's late penalty. The
runs meet nowhere else: autograded/<student>/ is each student's own. `--slurm` runs them as
a job array (autograde_slurm.py), merged the same way; the command (term.cli_autograde)
chooses.

Each run's log goes to logs/autograde/<assignment>/<student>.log in the grading directory.
"""
from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

STUDENT_GUARD_S = 3600.0     # wall s for one student's notebooks (nbgrader's own cell timeout: 600 s)


class HiddenTestChecksums(logging.Filter):
    """Drops one nbgrader warning that is always there and never means anything here.

    The release strips a grading cell's hidden tests and gives the student the stripped
    cell's checksum, while the gradebook keeps the source cell's: autograde then warns
    "Attribute 'checksum' for cell X has changed!" for every such cell of every student, and
    puts the source (hidden tests included) back all the same. For those cells only: a changed
    checksum of any other cell (a locked cell a student edited) is still logged."""

    def __init__(self, cells):
        super().__init__()
        self.cells = set(cells)

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (str(record.msg).startswith("Attribute '%s' for cell %s has changed!")
                    and len(args) >= 2 and args[0] == "checksum" and args[1] in self.cells)


def hidden_test_cells(source: Path) -> set[str]:
    """grade_ids of the source notebooks' cells that hold hidden tests."""
    import json
    cells = set()
    for path in source.glob("*/*.ipynb"):
        try:
            nb = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for cell in nb.get("cells", []):
            text = "".join(cell.get("source", ""))
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if grade_id and "BEGIN HIDDEN TESTS" in text:
                cells.add(grade_id)
    return cells


def quiet_known_noise(source: Path) -> None:
    """Called by nbgrader_config.py: the filter above, on the autograde app's logger."""
    logging.getLogger("AutogradeApp").addFilter(HiddenTestChecksums(hidden_test_cells(source)))


def default_jobs() -> int:
    """Students autograded at once: one per core (a notebook's kernel computes on one)."""
    return max(1, len(os.sched_getaffinity(0)))


def log_path(course: Path, assignment: str, student: str) -> Path:
    return course / "logs" / "autograde" / assignment / f"{student}.log"


def private_gradebook(course: Path, dest: Path) -> Path:
    """A consistent copy of the gradebook for one autograde run (SQLite's online backup)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.unlink(missing_ok=True)
    src, dst = sqlite3.connect(course / "gradebook.db"), sqlite3.connect(dest)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    return dest


def nbgrader_command(assignment: str, student: str, db: Path, force: bool) -> list[str]:
    return [sys.executable, "-m", "nbgrader", "autograde", assignment, "--student", student,
            f"--CourseDirectory.db_url=sqlite:///{db}", *(["--force"] if force else [])]


def nbgrader_env(course: Path) -> dict:
    return dict(os.environ, RTP_COURSE_GRADING_DIR=str(course))


def merge_student(course: Path, assignment: str, student: str, db: Path) -> dict:
    """Copy what autograde wrote for `student` from the private gradebook `db`; return
    {"late_s": seconds late, "score": autograded score of the notebooks}."""
    from nbgrader.api import Gradebook, MissingEntry
    from rtp_course.instructor.grade_record import gradebook
    with Gradebook(f"sqlite:///{db}", course_id="rtp-course") as src, gradebook(course) as dst:
        sub = src.find_submission(assignment, student)
        dst.update_or_create_student(student)
        extra = {"timestamp": sub.timestamp} if sub.timestamp else {}
        dsub = dst.update_or_create_submission(assignment, student, **extra)
        for nb in sub.notebooks:
            dnb = dst.find_submission_notebook(nb.notebook.name, assignment, student)
            dnb.late_submission_penalty = nb.late_submission_penalty
            for g in nb.grades:
                dg = dst.find_grade(g.name, nb.notebook.name, assignment, student)
                dg.auto_score, dg.needs_manual_grade = g.auto_score, g.needs_manual_grade
            for c in nb.comments:
                try:   # a solution or task cell's; the grading cells' comments are rtp-course's
                    dc = dst.find_comment(c.name, nb.notebook.name, assignment, student)
                except MissingEntry:
                    continue
                dc.auto_comment = c.auto_comment
        dst.db.commit()
        return {"late_s": dsub.total_seconds_late, "score": sum(g.auto_score or 0 for nb in
                                                               sub.notebooks for g in nb.grades)}


def _start(course: Path, assignment: str, student: str, force: bool, work: Path):
    db = private_gradebook(course, work / f"{student}.db")
    log = log_path(course, assignment, student)
    log.parent.mkdir(parents=True, exist_ok=True)
    from rtp_course.instructor import REPOSITORY
    with open(log, "w") as fh:       # the child keeps its own descriptor
        proc = subprocess.Popen(nbgrader_command(assignment, student, db, force), cwd=REPOSITORY,
                                env=nbgrader_env(course), stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    return proc, db, time.monotonic()


def autograde(course: Path, assignment: str, students, jobs: int, force: bool = False,
              log=print) -> dict:
    """{student: None, or why it failed}: every student autograded, `jobs` at once; each
    merged into the gradebook as soon as its run ends."""
    import shutil
    import tempfile
    from rtp_course.runtime import reaper
    work = Path(tempfile.mkdtemp(prefix="rtp-autograde-", dir=course))
    todo, running, failed = list(students), {}, {}
    before = reaper.descendants()
    # A kernel's process that detached (setsid, a double fork) comes back here, not to init,
    # and is killed once its nbgrader is gone: a notebook leaves nothing running.
    keep = lambda: [proc.pid for proc, _, _ in running.values()]  # noqa: E731
    try:
        with reaper.subreaping():
            _autograde(course, assignment, todo, running, failed, jobs, force, work, log,
                       lambda: clean_up_after_kernels(before, keep))
    finally:
        for proc, _, _ in running.values():
            os.killpg(proc.pid, 9)
        running.clear()
        clean_up_after_kernels(before, keep)
        shutil.rmtree(work, ignore_errors=True)
    return failed


def clean_up_after_kernels(before: set[int], keep) -> None:
    """Kill what ended runs left behind, then remove the private directories of their killed
    kernels (the sweep may have killed a kernel's guardian before it removed them)."""
    from rtp_course.runtime import reaper
    reaper.sweep_orphans(before, keep)
    reaper.remove_dead_owners_dirs("kernel")


def _autograde(course, assignment, todo, running, failed, jobs, force, work, log, sweep):
    while todo or running:
        while todo and len(running) < jobs:
            s = todo.pop(0)
            running[s] = _start(course, assignment, s, force, work)
        time.sleep(0.2)
        for s, (proc, db, started) in list(running.items()):
            if proc.poll() is None and time.monotonic() - started < STUDENT_GUARD_S:
                continue
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
            del running[s]
            sweep()
            failed[s] = _finish(course, assignment, s, proc.returncode, db,
                                time.monotonic() - started, log)


def _finish(course, assignment, student, code, db, seconds, log) -> str | None:
    """Merge one finished run; its line; why it failed (None: it did not)."""
    where = log_path(course, assignment, student)
    if code != 0:
        why = f"nbgrader autograde exited with {code}" if code and code > 0 else "stopped"
        log(f"{student}/{assignment}: NOT AUTOGRADED ({why}, {seconds:.0f} s): "
            f"{_last_error(where)} (log: {where})")
        return why
    try:
        got = merge_student(course, assignment, student, db)
    except Exception as e:            # a gradebook that would not take it: this student only
        log(f"{student}/{assignment}: NOT MERGED into the gradebook: {type(e).__name__}: {e}")
        return str(e)
    late = f"; submitted {got['late_s'] / 3600:.1f} h late" if got["late_s"] else ""
    log(f"{student}/{assignment}: autograded in {seconds:.0f} s (notebook points "
        f"{got['score']:g}{late}); code points: rtp-course grade")
    return None


def _last_error(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "no log"
    errors = [ln for ln in lines if "ERROR" in ln or "Error" in ln]
    return (errors or lines or ["(empty log)"])[-1].strip()[:300]


def students_of(course: Path, assignment: str, only=None) -> list[str]:
    found = sorted(p.parent.name for p in (course / "submitted").glob(f"*/{assignment}"))
    unknown = sorted(set(only or ()) - set(found))
    if unknown:
        raise ValueError(f"no submission of {assignment} by {', '.join(unknown)} in "
                         f"{course / 'submitted'}")
    return [s for s in found if not only or s in only]
