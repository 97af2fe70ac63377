"""`rtp-course grade ASSIGNMENT`: the points for code, computed outside the students' notebooks.

`nbgrader autograde` runs each student's notebook in a kernel with the
instructor's permissions: a cell placed before the hidden grading cell could
patch `grade()` and award itself full marks. So while nbgrader autogrades
(`nbgrader_config.py` sets RTP_COURSE_GRADE_OUTSIDE=1), `grade()` in the
notebook awards nothing and says so; this command then runs the public and
hidden checks on each student's collected modules, in confined worker
processes, and writes the points into nbgrader's gradebook as the grading
cells' autograded scores, through nbgrader's own API:

    nbgrader autograde 03_tp_communication
    rtp-course grade 03_tp_communication            # --jobs 2: two submissions at a time
    nbgrader export --to grades.csv

The checks' report for each student and exercise is written next to the
gradebook, in checks/<student>/<assignment>/<exercise>.txt.
"""
from __future__ import annotations

import multiprocessing
import os
import re
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from rtp_course.checker import report
from rtp_course.cluster.job import SlurmError
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


def grade_student(course: Path, assignment: str, student: str, cells, world_sizes=None) -> dict:
    """{grade_id: points} for one student, the reports written under checks/."""
    from rtp_course.checker import check
    from rtp_course.checker.registry import hidden_dir
    from rtp_course.instructor.grading import grading_backend
    impl = course / "submitted" / student / assignment / "rtp_course"
    out_dir = course / "checks" / student / assignment
    out_dir.mkdir(parents=True, exist_ok=True)
    points = {}
    for cell in cells:
        if not (impl / f"{cell.exercise}.py").exists():
            points[cell.grade_id] = 0.0
            (out_dir / f"{cell.exercise}.txt").write_text(f"rtp_course/{cell.exercise}.py was not handed in\n")
            continue
        rep = check(cell.exercise, impl=str(impl), hidden=hidden_dir() is not None,
                    world_sizes=world_sizes, quiet=True, grading=True, backend=grading_backend())
        points[cell.grade_id] = round(cell.points * rep.score(cell.exercise), 2)
        (out_dir / f"{cell.exercise}.txt").write_text(
            f"{cell.exercise}: {points[cell.grade_id]:g} of {cell.points:g} points for your code\n\n"
            f"{student_view(report.text(rep.results, width=FEEDBACK_WIDTH), impl)}\n")
    return points


FEEDBACK_WIDTH = 92   # characters: nbgrader's feedback page shows outputs unwrapped


def student_view(text: str, impl: Path) -> str:
    """Paths as the student knows them: their modules as rtp_course/<module>.py, torch's and
    the course's files by their place in the package, never the grader's directories."""
    import rtp_course
    text = text.replace(f"{impl}{os.sep}", f"rtp_course{os.sep}")
    text = text.replace(f"{Path(rtp_course.__file__).resolve().parent.parent}{os.sep}", "")
    text = re.sub(r"/[^\s\"']*/site-packages/", "", text)
    # any other absolute path (a run directory, the grader's home): its last part only
    return re.sub(r"(?<![\w.~])/(?:[\w.@+-]+/)+([\w.@+-]+)", r"\1", text)


def write_feedback(course: Path, assignment: str, student: str, cells) -> None:
    """Put each exercise's report in its grading cell of the autograded notebook, where
    `nbgrader generate_feedback` shows it to the student beside the points."""
    import nbformat
    for notebook in {c.notebook for c in cells}:
        path = course / "autograded" / student / assignment / f"{notebook}.ipynb"
        if not path.exists():
            continue
        nb = nbformat.read(path, as_version=4)
        by_id = {c.grade_id: c for c in cells if c.notebook == notebook}
        for cell in nb.cells:
            graded = by_id.get(cell.metadata.get("nbgrader", {}).get("grade_id"))
            if graded is None or cell.cell_type != "code":
                continue
            report_file = course / "checks" / student / assignment / f"{graded.exercise}.txt"
            text = report_file.read_text() if report_file.exists() else ""
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
        nbformat.write(nb, path)


def write_gradebook(course: Path, assignment: str, student: str, cells, points: dict) -> list[str]:
    """Set the grading cells' autograded scores; return what could not be written."""
    from nbgrader.api import Gradebook, MissingEntry
    missing = []
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="rtp-course") as gb:
        for cell in cells:
            try:
                grade = gb.find_grade(cell.grade_id, cell.notebook, assignment, student)
            except MissingEntry:
                missing.append(f"{student}/{assignment}/{cell.notebook}:{cell.grade_id}")
                continue
            grade.auto_score = points[cell.grade_id]
        gb.db.commit()
    return missing


def record(course: Path, assignment: str, student: str, cells, points: dict, log=print) -> None:
    """One student's points into the gradebook, the reports into the feedback, a line to `log`."""
    missing = write_gradebook(course, assignment, student, cells, points)
    write_feedback(course, assignment, student, cells)
    note = f" (not in the gradebook, run nbgrader autograde first: {', '.join(missing)})" if missing else ""
    log(f"{student}/{assignment}: " + ", ".join(f"{c.exercise} {points[c.grade_id]:g}/{c.points:g}"
                                              for c in cells) + note)


def default_jobs() -> int:
    """Submissions graded at once on this machine: one per two cores. Each keeps to cores of
    its own (`cores_for`); a submission's ranks, relay and checks on fewer than two cores
    grade slower than one at a time on both (on 2 cores, 2 pinned at once: 0.85x of 1)."""
    return max(1, len(os.sched_getaffinity(0)) // 2)


def cores_for(slot: int, jobs: int, cores: list) -> list:
    """The cores of grading slot `slot` of `jobs`: a share of its own where there are enough."""
    if jobs <= len(cores):
        return cores[slot * len(cores) // jobs:(slot + 1) * len(cores) // jobs]
    return [cores[slot % len(cores)]]


def _take_cores(slots, jobs: int) -> None:
    """A grading process's first act: keep to cores of its own, it and every process it starts.
    A submission's ranks may start as many busy processes as they like (a relay rank cannot
    change its cores: runtime/seccomp); the submission graded beside it keeps its cores."""
    with slots.get_lock():
        slot, slots.value = slots.value, slots.value + 1
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, cores_for(slot, jobs, cores))


def grading_pool(jobs: int) -> ProcessPoolExecutor:
    """`jobs` grading processes, each on cores of its own (spawned: no state shared)."""
    ctx = multiprocessing.get_context("spawn")
    return ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_take_cores,
                               initargs=(ctx.Value("i", 0), jobs))


def grade_assignment(course: Path, assignment: str, students=None, jobs: int = 1, world_sizes=None,
                     log=print) -> dict:
    """{student: {grade_id: points}} for every (or the named) student of the assignment."""
    cells = graded_cells(course, assignment)
    if not cells:
        raise ValueError(f"no grading cell of {course / 'source' / assignment} calls grade(<exercise>)")
    found = sorted(p.parent.name for p in (course / "submitted").glob(f"*/{assignment}"))
    students = [s for s in found if not students or s in students]
    out = {}
    if jobs <= 1:
        for student in students:
            out[student] = grade_student(course, assignment, student, cells, world_sizes)
            record(course, assignment, student, cells, out[student], log)
        return out
    # Processes, not threads: the serial references seed torch's global generator, so two
    # gradings in one process would draw each other's weights. The gradebook (SQLite) is
    # written here only, one student at a time, in the order they finish.
    with grading_pool(jobs) as pool:
        futures = {pool.submit(grade_student, course, assignment, s, cells, world_sizes): s
                   for s in students}
        for fut in as_completed(futures):
            student = futures[fut]
            out[student] = fut.result()
            record(course, assignment, student, cells, out[student], log)
    return {s: out[s] for s in students}


def cli_grade(args) -> int:
    from rtp_course.instructor import grading_dir
    from rtp_course.instructor.manifest import AlteredGrader, verify
    course = grading_dir()
    from rtp_course.runtime import relay
    if not relay.supported():
        import torch
        print(f"rtp-course grade: warning: torch {torch.__version__} cannot run the checker's "
              f"relay (torch 2.7 or newer can): the submissions' ranks will talk over gloo, and "
              f"what a rank logs of its communication is then its own word (docs/INSTRUCTORS.md)",
              file=sys.stderr)
    try:
        verify(course)
        if args.array_task is not None:          # inside a task of `--slurm`'s job array
            from rtp_course.instructor import grade_slurm
            grade_slurm.run_task(course, args.assignments[0], args.students_file, args.array_task,
                                 args.world_size)
            return 0
        for assignment in args.assignments:
            if args.slurm or args.merge:
                from rtp_course.instructor import grade_slurm
                grade_slurm.cli(args, course, assignment)
            else:
                grade_assignment(course, assignment, students=args.student,
                                 jobs=args.jobs or default_jobs(), world_sizes=args.world_size)
    except SlurmError as e:
        print(f"rtp-course grade: {e}", file=sys.stderr)
        return 1
    except (ValueError, OSError, AlteredGrader) as e:
        print(f"rtp-course grade: {e}", file=sys.stderr)
        return 2
    return 0
