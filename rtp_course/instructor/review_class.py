"""What the instructor should read after grading: review.csv, the gradebook's comments, one line
per flagged student.

For an assignment, each graded submission's exercise modules are scanned for code that
reaches into the grader or around the exercise (review/scan.py: file, line, reason; the
whole class's files in one worker process bounded in CPU time, memory and wall time a file,
review/worker.py: a file whose scan runs out is flagged `scan-limit`, and the others are
scanned all the same), and the class is compared, exercise by exercise, with the reference
solutions and within itself (review/similarity.py: the stub the students were given is the
base, so what it holds counts for nothing; an exercise's copy is found in whichever module of
the submission it sits, alone or with what the exercise imports). Both only read the source.

review.csv, in the grading directory, has one row per finding:

    student, assignment, exercise, kind, where, score, reason

kind `flag` (where: file:line), `near-copy` (where: the other party, "reference" or a
student; score at or above similarity.NEAR_COPY) or `similarity` (the closest other pairs,
for context). Grading an assignment again replaces its rows (a flag row only for the
students graded), so the file is the class's current list for every assignment.
"""
from __future__ import annotations

import csv
import os
import stat
from pathlib import Path

from rtp_course.checker.report import visible
from rtp_course.course import EXERCISES
from rtp_course.instructor import grade_outcome, grade_record
from rtp_course.instructor.review.source import python_text
from rtp_course.instructor.review.worker import fingerprint_modules, scan_dirs

NAME = "review.csv"
HEADER = ("student", "assignment", "exercise", "kind", "where", "score", "reason")
TOP = 20                 # closest pairs listed per exercise (near copies are always listed)
SHOWN = 3                # findings quoted in a student's line; the rest are in review.csv


def _read(path: Path, limit: int = 2 << 20, python: bool = False) -> str | None:
    """A file's text (`python`: a module's, decoded as Python decodes it, review/source.py);
    None for anything but a regular file (a FIFO would block the class's review, a link would
    read what the student does not own)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = fh.read(limit)
    return python_text(data) if python else data.decode("utf-8", "replace")


def class_files(course: Path, assignment: str, exercises) -> dict:
    """{student: {exercise: path}} of every submission's regular files (no link, no FIFO)."""
    out = {}
    for folder in sorted((course / "submitted").glob(f"*/{assignment}/rtp_course")):
        out[folder.parent.parent.name] = {ex: folder / f"{ex}.py" for ex in exercises
                                          if _regular(folder / f"{ex}.py")}
    return out


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def class_prints(course: Path, assignment: str, stubs: dict) -> tuple[dict, dict]:
    """({student: {module: fingerprints}}, {student: {module: the modules it imports}}) of every
    exercise module of each submission (a copy may sit in any of them), made in the review's
    bounded worker (a file that runs out of it is left out here; its scan flags it)."""
    files = class_files(course, assignment, EXERCISES)
    order = [(s, ex, path) for s, mine in files.items() for ex, path in mine.items()]
    made = fingerprint_modules([(str(path), stubs.get(ex)) for _, ex, path in order])
    prints: dict = {s: {} for s in files}
    imports: dict = {s: {} for s in files}
    for (s, ex, _), found in zip(order, made):
        if found is not None:
            prints[s][ex], imports[s][ex] = found
    return prints, imports


def reference_and_stubs(course: Path, assignment: str, exercises) -> tuple[dict, dict]:
    """The reference solutions, and the stubs the students started from (the assignment's
    source folder holds them; the course's own stubs otherwise)."""
    import rtp_course
    from rtp_course.instructor import solutions_dir
    ref_dir, given = solutions_dir(), course / "source" / assignment / "rtp_course"
    package = Path(rtp_course.__file__).resolve().parent
    reference = {ex: _read(ref_dir / f"{ex}.py", python=True) for ex in exercises} if ref_dir else {}
    stubs = {ex: _read(given / f"{ex}.py", python=True) or _read(package / f"{ex}.py", python=True)
             for ex in EXERCISES}            # every module's: a copy may sit in any of them
    return ({k: v for k, v in reference.items() if v}, {k: v for k, v in stubs.items() if v})


def findings(course: Path, assignment: str, exercises, students) -> list[tuple]:
    """The rows of review.csv for `assignment`: flags of `students`, pairs of the class."""
    from rtp_course.instructor.assignment import impl_dir
    from rtp_course.instructor.review.similarity import compare_prints, fingerprints, imported
    rows = []
    scanned = scan_dirs({s: impl_dir(course, assignment, s) for s in students}, EXERCISES)
    for s in students:
        for flag in scanned[s]:
            rows.append((s, assignment, Path(flag.file).stem, "flag", f"{flag.file}:{flag.line}",
                         "", f"{flag.reason} [{flag.code}]"))
        rows.extend(_tampered(course, assignment, s))
    reference, stubs = reference_and_stubs(course, assignment, exercises)
    prints, imports = class_prints(course, assignment, stubs)
    pairs = compare_prints(prints, {ex: fingerprints(src, stubs.get(ex)) for ex, src in reference.items()},
                           top=(len(prints) + 1) ** 2, imports=imports, exercises=exercises,
                           given={ex: imported(src, EXERCISES) for ex, src in stubs.items()})
    shown: dict = {}
    for p in pairs:                 # every near copy, and the closest other pairs for context
        if not p.near_copy and shown.setdefault(p.exercise, 0) >= TOP:
            continue
        shown[p.exercise] = shown.get(p.exercise, 0) + (not p.near_copy)
        kind = "near-copy" if p.near_copy else "similarity"
        why = (f"a near copy of {'the reference solution' if p.b == 'reference' else p.b}'s "
               f"{p.exercise}.py once names, comments and layout are set aside"
               + (f", found in {p.a}'s {p.where}" if p.where else "")) if p.near_copy else ""
        rows.append((p.a, assignment, p.exercise, kind, p.b, f"{p.score:.3f}", why))
    return rows


def _tampered(course: Path, assignment: str, student: str) -> list[tuple]:
    """Rows for the exercises whose report says the rank changed the harness while it ran
    (confinement/integrity.py)."""
    from rtp_course.confinement.integrity import MARK
    from rtp_course.instructor.grade_record import checks_dir
    rows = []
    for report in sorted(checks_dir(course, student, assignment).glob("*.txt")):
        flat = " ".join((_read(report) or "").split())    # the page wraps: MARK may span two lines
        if MARK in flat:
            rows.append((student, assignment, report.stem, "tampered", report.name, "",
                         flat[flat.index(MARK):][:400]))
    return rows


OF_ONE_STUDENT = ("flag", "tampered")     # rows a run writes again only for the students it graded


def write_csv(course: Path, assignment: str, rows: list, students) -> Path:
    """Replace the assignment's rows in review.csv (a student's flags and tampering: only the
    students graded now; a regrade of one student keeps the others')."""
    path = course / NAME
    kept = []
    if path.exists():
        with open(path, newline="") as fh:
            for row in csv.DictReader(fh):
                mine = row["assignment"] == assignment and (row["kind"] not in OF_ONE_STUDENT
                                                            or row["student"] in students)
                if not mine:
                    kept.append(tuple(row.get(h, "") for h in HEADER))
    order = {"flag": 0, "near-copy": 1, "similarity": 2}
    everything = sorted(kept + rows, key=lambda r: (r[1], order.get(r[3], 3), r[0], r[2], r[4]))
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(HEADER)
        writer.writerows(everything)
    os.replace(tmp, path)
    return path


def comments(course: Path, assignment: str, cells, rows: list, grades: dict) -> dict:
    """{(student, notebook, grade_id): text} for the gradebook: a provisional grade's reason,
    then what review.csv says of the student."""
    out = {}
    for student, cell_grades in grades.items():
        mine = [r for r in rows if r[0] == student and r[3] != "similarity"] + \
               [r for r in rows if r[4] == student and r[3] == "near-copy"]
        for cell, g in zip(cells, cell_grades):
            lines = []
            if g.status != "graded":
                lines.append(f"code points {g.status}: {g.phrase()}")
            lines += [_said(r, student) for r in mine]
            out[(student, cell.notebook, cell.grade_id)] = "\n".join(lines)
    return out


def _said(row: tuple, student: str) -> str:
    who, _, exercise, kind, where, score, reason = row
    if kind == "flag":
        return f"review: {where}: {reason}"
    if kind == "tampered":
        return f"review: {exercise}: {reason}"
    other = where if who == student else who
    other = "the reference solution" if other == "reference" else other
    return f"review: {exercise}.py is a near copy of {other} (similarity {score})"


def review(course: Path, assignment: str, cells, graded=None, log=print) -> list:
    """Scan and compare; write review.csv and the gradebook's comments; log one line per
    flagged student. `graded`: grade_code.ClassGrades of the students graded now (None: every
    student with a code.json, as after a Slurm merge)."""
    exercises = [ex for ex in EXERCISES if ex in {c.exercise for c in cells}]
    if graded is not None:
        grades = graded.grades
    else:
        grades = {}
        for path in sorted((course / "checks").glob(f"*/{assignment}/{grade_outcome.STATUS}")):
            found = grade_outcome.read_status(path) or {}
            if all(c.grade_id in found for c in cells):
                grades[path.parent.parent.name] = [found[c.grade_id] for c in cells]
    # what a flag quotes is the submission's own text (a name it used): shown, never acted on
    # by the instructor's terminal or spreadsheet
    rows = [tuple(visible(v) if isinstance(v, str) else v for v in row)
            for row in findings(course, assignment, exercises, sorted(grades))]
    write_csv(course, assignment, rows, set(grades))
    grade_record.write_comments(course, assignment, comments(course, assignment, cells, rows, grades))
    _log_flagged(assignment, rows, set(grades), log)
    return rows


def _log_flagged(assignment: str, rows: list, students, log) -> None:
    """One line per flagged student: their flags, then their near copies, by exercise."""
    for student in sorted(students):
        said = [f"{r[2]}: its checks' report says the code changed the harness ({r[4]})"
                for r in rows if r[3] == "tampered" and r[0] == student]
        said += [f"{r[4]}: {r[6]}" for r in rows if r[3] == "flag" and r[0] == student]
        more = f"; and {len(said) - SHOWN} more flags" if len(said) > SHOWN else ""
        said = said[:SHOWN]
        copies: dict = {}
        for r in rows:
            if r[3] == "near-copy" and student in (r[0], r[4]):
                copies.setdefault(r[2], []).append(r[4] if r[0] == student else r[0])
        for exercise, others in sorted(copies.items()):
            mates = sorted(o for o in others if o != "reference")
            parts = ["the reference solution"] if "reference" in others else []
            if mates:
                listed = ", ".join(mates[:SHOWN]) + (", ..." if len(mates) > SHOWN else "")
                parts.append(f"{len(mates)} classmate{'s' * (len(mates) > 1)} ({listed})")
            said.append(f"{exercise}.py is a near copy of {' and '.join(parts)}")
        if said and log:
            log(f"REVIEW  {student}/{assignment}: {'; '.join(said)}{more} (review.csv)")
