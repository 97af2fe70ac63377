"""One command per intention of the instructor's term, each safe to repeat.

    rtp-course autograde ASSIGNMENT                  nbgrader autograde, spread over the cores
                                                     (autograde.py) or a Slurm array
                                                     (autograde_slurm.py)
    rtp-course grade ASSIGNMENT                      the points for code (grade_code.py), here
                                                     or on Slurm (grade_slurm.py), then the
                                                     class's review (review_class.py)
    rtp-course regrade ASSIGNMENT --student ID ...   notebooks and code of these students again
    rtp-course export [--to FILE] [--provisional]    the grades CSV, refused while code points
                                                     are missing, were overwritten since, or are
                                                     provisional (unless --provisional: then a
                                                     column says which)

`nbgrader autograde` zeroes the points for code (the notebook's grading cells award nothing
while it runs, grading.py says why), so it must always be followed by `rtp-course grade`:
`regrade` does both, and `export` checks, cell by cell, that the gradebook holds the points
`rtp-course grade` recorded (code.json) before nbgrader writes the CSV.

The commands sit here, above the modules that do the work, so that a module's Slurm
variant (autograde_slurm.py, grade_slurm.py) builds on the local one without the local one
importing it back.
"""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

PROVISIONAL = "provisional"     # the grades CSV's column: what a row's points leave out


def code_problems(course: Path) -> tuple[list[str], dict]:
    """(problems, provisional) of the gradebook's code points, over every assignment it has;
    provisional: {(student, assignment): [what each provisional mark leaves out]}."""
    from nbgrader.api import MissingEntry
    from rtp_course.instructor.assignment import graded_cells
    from rtp_course.instructor.grade_outcome import STATUS, read_status
    from rtp_course.instructor import REPOSITORY, late
    from rtp_course.instructor.grade_record import checks_dir, gradebook
    the_plugin = late.plugin(late.settings(str(REPOSITORY)))
    problems, provisional = [], {}
    with gradebook(course) as gb:
        for assignment in gb.assignments:
            cells = graded_cells(course, assignment.name)
            for sub in assignment.submissions if cells else ():
                who = f"{sub.student.id}/{assignment.name}"
                problems += [f"{who}: {s} (grade again: rtp-course grade {assignment.name} "
                             f"--student {sub.student.id})"
                             for s in late.stale(gb, assignment.name, sub.student.id, the_plugin)]
                status = read_status(checks_dir(course, sub.student.id, assignment.name) / STATUS) or {}
                for cell in cells:
                    got = status.get(cell.grade_id)
                    try:
                        grade = gb.find_grade(cell.grade_id, cell.notebook, assignment.name,
                                              sub.student.id)
                    except MissingEntry:
                        problems.append(f"{who}: {cell.exercise}: not autograded")
                        continue
                    if grade.manual_score is not None:      # the instructor's own grade wins
                        continue
                    score = grade.auto_score
                    if got is None:
                        problems.append(f"{who}: {cell.exercise}: no code points yet")
                    elif got.points is None:
                        problems.append(f"{who}: {cell.exercise}: not graded ({got.why})")
                    elif score != got.points:
                        problems.append(f"{who}: {cell.exercise}: the gradebook has {score} points, "
                                        f"`rtp-course grade` gave {got.points:g} (autograde ran since?)")
                    elif got.status == "provisional":
                        provisional.setdefault((sub.student.id, assignment.name), []).append(
                            got.phrase())
    return problems, provisional


def export(course: Path, to: Path, force: bool = False, log=print,
           provisional_ok: bool = False) -> int:
    """nbgrader export, after checking the code points: refused on a missing or overwritten
    one unless `force`, and on a provisional one unless `provisional_ok` (or `force`); the
    CSV's `provisional` column names what each row's points leave out."""
    from rtp_course.instructor import REPOSITORY
    problems, provisional = code_problems(course)
    for (student, assignment), said in sorted(provisional.items()):
        log(f"PROVISIONAL  {student}/{assignment}: {'; '.join(said)}")
    for p in problems:
        log(f"{'WARNING' if force else 'MISSING'}  {p}")
    if problems and not force:
        who = sorted({p.split(":")[0] for p in problems})
        log(f"not exported: {len(problems)} code grade(s) missing or overwritten; grade them "
            f"(rtp-course grade ASSIGNMENT --student ID), or export anyway with --force. "
            f"Students: {', '.join(who)}")
        return 2
    if provisional and not (provisional_ok or force):
        who = sorted(f"{s}/{a}" for s, a in provisional)
        log(f"not exported: {len(who)} grade(s) provisional (some checks not graded: the "
            f"machine was too busy, or they were not run); grade them again (rtp-course grade "
            f"ASSIGNMENT --student ID), or export them marked in the '{PROVISIONAL}' column "
            f"with --provisional. Students: {', '.join(who)}")
        return 2
    env = dict(os.environ, RTP_COURSE_GRADING_DIR=str(course))
    r = subprocess.run([sys.executable, "-m", "nbgrader", "export", "--to", str(to)],
                       cwd=REPOSITORY, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        log(f"nbgrader export failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        return 1
    if force:                       # what was exported anyway says what it lacks
        for p in problems:
            who, _, what = p.partition(": ")
            student, _, assignment = who.partition("/")
            provisional.setdefault((student, assignment), []).append(what.split(" (grade again")[0])
    mark_provisional(to, provisional)
    log(f"grades written to {to}")
    return 0


def mark_provisional(path: Path, provisional: dict) -> None:
    """Add the `provisional` column to nbgrader's CSV: on each (assignment, student) row, what
    its provisional marks leave out ("" for a final grade)."""
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        fields, rows = list(reader.fieldnames or []), list(reader)
    for row in rows:
        row[PROVISIONAL] = "; ".join(provisional.get((row.get("student_id"), row.get("assignment")), []))
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=[*fields, PROVISIONAL])
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


def regrade(course: Path, assignment: str, students, jobs: int, world_sizes=None,
            timeout_scale: float = 1.0, log=print) -> int:
    """autograde --force, then the code points, for `students`: never one without the other."""
    from rtp_course.instructor import autograde, grade_code
    from rtp_course.instructor.assignment import graded_cells
    failed = autograde.autograde(course, assignment, students, jobs, force=True, log=log)
    again = [s for s in students if not failed.get(s)]
    if not graded_cells(course, assignment):
        return 1 if any(failed.values()) else 0          # a quiz: its notebook is everything
    graded = grade_code.grade_assignment(course, assignment, again, jobs, world_sizes,
                                         timeout_scale, log) if again else None
    unfinished = [s for s in again if not graded.final(s)] if graded else []
    return 1 if any(failed.values()) or unfinished else 0


def cli_regrade(args) -> int:
    from rtp_course.instructor import autograde, grading_dir
    from rtp_course.instructor.grade_pool import default_jobs
    from rtp_course.instructor.manifest import AlteredGrader, verify
    from rtp_course.instructor.points import PointsChanged, verify_points
    course = grading_dir()
    try:
        verify(course)
        verify_points(course, [args.assignment])
        students = autograde.students_of(course, args.assignment, args.student)
        return regrade(course, args.assignment, students, args.jobs or default_jobs(),
                       args.world_size, args.timeout_scale)
    except (ValueError, OSError, AlteredGrader, PointsChanged) as e:
        print(f"rtp-course regrade: {e}", file=sys.stderr)
        return 2


def cli_export(args) -> int:
    from rtp_course.instructor import grading_dir
    course = grading_dir()
    if not (course / "gradebook.db").exists():
        print(f"rtp-course export: no gradebook in {course}", file=sys.stderr)
        return 2
    return export(course, Path(args.to) if args.to else course / "grades.csv", args.force,
                  provisional_ok=getattr(args, "provisional", False))


def cli_autograde(args) -> int:
    from rtp_course.instructor import autograde, grading_dir
    course = grading_dir()
    failed = {}
    try:
        for a in args.assignments:
            students = autograde.students_of(course, a, args.student)
            if not (course / "gradebook.db").exists():
                raise ValueError(f"no gradebook in {course}: run `nbgrader generate_assignment "
                                 f"{a}` first")
            if args.slurm:
                from rtp_course.instructor import autograde_slurm
                got = autograde_slurm.run(course, a, students, args)
            else:
                got = autograde.autograde(course, a, students, args.jobs or autograde.default_jobs(),
                                         args.force)
            failed.update({f"{s}/{a}": why for s, why in got.items() if why})
    except ValueError as e:
        print(f"rtp-course autograde: {e}", file=sys.stderr)
        return 2
    if failed:
        print(f"rtp-course autograde: {len(failed)} not autograded: {', '.join(failed)}",
              file=sys.stderr)
        return 1
    return 0


def cli_grade(args) -> int:
    from rtp_course.instructor import grade_code, grading_dir, review_class
    from rtp_course.instructor.assignment import graded_cells
    from rtp_course.instructor.manifest import AlteredGrader, verify
    from rtp_course.instructor.points import PointsChanged, verify_points
    from rtp_course.cluster.job import SlurmError
    course = grading_dir()
    scale = getattr(args, "timeout_scale", 1.0) or 1.0
    try:
        verify(course)
        if args.array_task is not None:          # inside a task of `--slurm`'s job array
            from rtp_course.instructor import grade_slurm
            grade_slurm.run_task(course, args.assignments[0], args.students_file, args.array_task,
                                 args.world_size)
            return 0
        verify_points(course, args.assignments)  # (the array's submitter did, for its tasks)
        unfinished = []
        for assignment in args.assignments:
            if args.slurm or args.merge:
                from rtp_course.instructor import grade_slurm
                grade_slurm.cli(args, course, assignment)
                if args.merge or not args.no_wait:
                    review_class.review(course, assignment, graded_cells(course, assignment), None)
                continue
            graded = grade_code.grade_assignment(
                course, assignment, students=args.student, jobs=args.jobs or grade_code.default_jobs(),
                world_sizes=args.world_size, timeout_scale=scale)
            unfinished += [f"{s}/{assignment}" for s in graded.grades if not graded.final(s)]
    except SlurmError as e:
        print(f"rtp-course grade: {e}", file=sys.stderr)
        return 1
    except (ValueError, OSError, AlteredGrader, PointsChanged) as e:
        print(f"rtp-course grade: {e}", file=sys.stderr)
        return 2
    if unfinished:
        print(f"rtp-course grade: {len(unfinished)} submission(s) not fully graded (above): "
              f"{', '.join(unfinished)}; grade them again with --student", file=sys.stderr)
        return 1
    return 0
