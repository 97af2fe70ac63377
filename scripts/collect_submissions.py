#!/usr/bin/env python3
"""Place students' work where `nbgrader autograde` looks: <course>/submitted/<student>/<assignment>/.

    python scripts/collect_submissions.py SUBMISSIONS [ASSIGNMENT ...]

SUBMISSIONS holds one folder per student, named by the student id: that student's
copy of the student edition (a clone of their repository, an unpacked archive, or
a folder with the notebooks and rtp_course/ side by side). For each assignment
(default: every folder of <course>/source) it copies

    the assignment's notebooks    from notebooks/<name>.ipynb (or <name>.ipynb at the top)
    the exercise modules      from rtp_course/<exercise>.py

and nothing else: the rest of the course (launcher, checker, models) always comes
from the instructor's installation, so a submission cannot change how it is graded.
Only regular files are copied: a symlink (to the reference solutions, say) or a special
file, at any level of the student's folder, is refused and named, and counts as missing;
so is a module over 1 MB or a notebook over 64 MB (the grader reads them whole).
The submission time (nbgrader's timestamp, for late penalties) is one the student cannot
set: the time of this collection, or the hand-in system's record of it (`--times FILE`, a
CSV of `student,time` rows, the time in ISO 8601), never a commit date (a student sets
those at will). Collecting again files that have not changed keeps the time of the first
collection, so a repeated collection makes no one late. `nbgrader autograde` reads it from
submitted/<student>/<assignment>/timestamp.txt into the gradebook.
Modules that mention the reference solutions or the hidden checks are flagged (read as Python
reads them: a `# coding:` line is honoured), and so is a module that declares an encoding
other than UTF-8: the grading machine has both, and autograde runs student code with your
permissions.
"""
import argparse
import csv
import datetime
import os
import re
import shutil
import stat
import sys
from pathlib import Path

from rtp_course.course import EXERCISES
from rtp_course.instructor import grading_dir as course_dir
from rtp_course.instructor.review.source import finding as encoding_finding, python_text


def now() -> str:
    """This moment in UTC, as nbgrader's timestamp.txt holds it."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def read_times(path: Path) -> dict:
    """{student: time} from the hand-in system's CSV (`student,time` rows; a header is skipped)."""
    out = {}
    with open(path, newline="") as fh:
        for row in csv.reader(fh):
            if len(row) >= 2 and row[0].strip() and not row[0].strip().lower().startswith("student"):
                stamp = row[1].strip()
                datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))   # refuse a typo now
                out[row[0].strip()] = stamp
    return out


def _contents(folder: Path) -> dict:
    """{relative path: bytes} of the collected files of one submission ({} if none)."""
    if not folder.is_dir():
        return {}
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != "timestamp.txt"}


MODULE_BYTES, NOTEBOOK_BYTES = 1 << 20, 64 << 20     # the reference's modules are ~30 KB


class TooLarge(OSError):
    pass


SUSPICIOUS = re.compile(r"\bsolutions\b|tests[/.]hidden|RTP_COURSE_HIDDEN_CHECKS")


def refusal(path: Path, root: Path, limit: int) -> str | None:
    """Why `path` (under `root`) is not copied, or None for a regular file of at most `limit`
    bytes reached through real directories only. None of its components may be a symlink: a
    link to the reference would be graded as the student's own work."""
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except OSError:
            return "missing"
        if stat.S_ISLNK(mode):
            return f"{current.relative_to(root)} is a symlink"
    if not stat.S_ISREG(mode):
        return "not a regular file"
    return _too_large(limit) if os.lstat(current).st_size > limit else None


def _too_large(limit: int) -> str:
    return f"larger than {limit >> 20} MB"


def copy_regular(src: Path, dest: Path, limit: int) -> None:
    """Copy without following a symlink swapped in after the check (O_NOFOLLOW), and no more
    than `limit` bytes, whatever the file grew to since."""
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fin:
        if not stat.S_ISREG(os.fstat(fin.fileno()).st_mode):
            raise OSError(f"{src} is not a regular file")
        data = fin.read(limit + 1)
        st = os.fstat(fin.fileno())
    if len(data) > limit:
        raise TooLarge(_too_large(limit))
    dest.write_bytes(data)
    # the times, never the mode: a module handed in with mode 000 is readable for the grader
    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))


def _why(e: OSError) -> str:
    return str(e) if isinstance(e, TooLarge) else f"unreadable ({e.strerror or e})"


def collect(student_dir: Path, course: Path, assignment: str, handed_in: str | None = None) -> list[str]:
    """Copy one student's files for one assignment; return what was missing. `handed_in`: the
    hand-in system's time for it (default: now, or the earlier collection's if nothing changed)."""
    source = course / "source" / assignment
    dest = course / "submitted" / student_dir.name / assignment
    before, earlier = _contents(dest), _earlier_time(dest)
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "rtp_course").mkdir(parents=True)
    missing = []
    def refused(path: Path, why: str) -> None:
        print(f"REFUSED: {path}: {why}; only regular files of a sane size are collected",
              file=sys.stderr)
        missing.append(f"{path.relative_to(student_dir)} (refused: {why})")

    for nb in sorted(source.glob("*.ipynb")):
        candidates = (student_dir / "notebooks" / nb.name, student_dir / nb.name,
                      student_dir / assignment / nb.name)
        why = {c: refusal(c, student_dir, NOTEBOOK_BYTES) for c in candidates}
        found = next((c for c in candidates if why[c] is None), None)
        if found:
            try:
                copy_regular(found, dest / nb.name, NOTEBOOK_BYTES)
            except OSError as e:          # too large, or unreadable (mode 000 under a plain user)
                refused(found, _why(e))
        elif any(w != "missing" for w in why.values()):
            refused(next(c for c in candidates if why[c] != "missing"),
                    next(w for w in why.values() if w != "missing"))
        else:
            missing.append(nb.name)
    for ex in EXERCISES:
        src = student_dir / "rtp_course" / f"{ex}.py"
        why = refusal(src, student_dir, MODULE_BYTES)
        if why is None:
            try:
                copy_regular(src, dest / "rtp_course" / src.name, MODULE_BYTES)
            except OSError as e:
                refused(src, _why(e))
                continue
            data = (dest / "rtp_course" / src.name).read_bytes()
            if any(SUSPICIOUS.search(text) for text in (python_text(data), data.decode("utf-8", "replace"))):
                print(f"WARNING: {src} mentions the solutions or hidden checks: read it before "
                      f"trusting its grade", file=sys.stderr)
            encoding = encoding_finding(data)
            if encoding:
                print(f"WARNING: {src}: {encoding}", file=sys.stderr)
        elif why == "missing":
            missing.append(f"rtp_course/{ex}.py")
        else:
            refused(src, why)
    unchanged = earlier and before == _contents(dest)
    (dest / "timestamp.txt").write_text(handed_in or (earlier if unchanged else now()))
    if earlier and not unchanged:
        CHANGED.setdefault(assignment, []).append(student_dir.name)
    return missing


CHANGED: dict = {}      # assignment -> students collected before whose files changed since


def _earlier_time(dest: Path) -> str | None:
    try:
        return (dest / "timestamp.txt").read_text().strip() or None
    except OSError:
        return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("submissions", type=Path, help="one folder per student, named by student id")
    p.add_argument("assignments", nargs="*", help="default: every assignment in <course>/source")
    p.add_argument("--course", type=Path, default=None, help="course directory (default: nbgrader_config.py's)")
    p.add_argument("--times", type=Path, metavar="CSV",
                   help="the hand-in system's submission times: `student,time` rows (ISO 8601); "
                        "default: the time of this collection")
    args = p.parse_args(argv)
    CHANGED.clear()
    times = read_times(args.times) if args.times else {}
    course = (args.course or course_dir()).resolve()
    assignments = args.assignments or sorted(d.name for d in (course / "source").glob("*") if d.is_dir())
    if not assignments:
        print(f"no assignments in {course / 'source'}: run scripts/make_nbgrader_source.py first",
              file=sys.stderr)
        return 2
    entries = sorted(d for d in args.submissions.iterdir() if not d.name.startswith("."))
    for d in [d for d in entries if d.is_symlink()]:
        print(f"REFUSED: {d}: a student's folder that is a symlink is not collected",
              file=sys.stderr)
    students = [d for d in entries if d.is_dir() and not d.is_symlink()]
    for student in students:
        for a in assignments:
            missing = collect(student, course, a, times.get(student.name))
            note = f" (missing: {', '.join(missing)})" if missing else ""
            stamp = (course / "submitted" / student.name / a / "timestamp.txt").read_text()
            print(f"{student.name}/{a}: handed in {stamp}{note}")
    print(f"{len(students)} student(s) -> {course / 'submitted'}; next:\n" + "\n".join(
        f"    {next_step(course, a)}" for a in assignments))
    for a, changed in sorted(CHANGED.items()):      # autograde skips a student it has graded
        print(f"changed since they were graded, in {a}: grade them again with\n"
              f"    rtp-course regrade {a} --student {' '.join(sorted(changed))}")
    return 0


def next_step(course: Path, assignment: str) -> str:
    """The commands that grade `assignment`: its notebooks, then its code if a cell grades code
    (a quiz has none: `rtp-course grade` has nothing to do there, and says so)."""
    from rtp_course.instructor.assignment import graded_cells
    try:
        code = f" && rtp-course grade {assignment}" if graded_cells(course, assignment) else ""
    except Exception:               # a source notebook nbformat cannot read: nbgrader will say
        code = ""
    return f"rtp-course autograde {assignment}{code}"


if __name__ == "__main__":
    sys.exit(main())
