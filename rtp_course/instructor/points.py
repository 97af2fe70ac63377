"""`rtp-course points`: the course table's points and check weights, and what depends on them.

The course table (`rtp_course/course/__init__.py`: `Exercise.points`, `Exercise.weights`)
is the source of truth. What follows from it:

* each graded notebook's grading cell (`points` in its nbgrader metadata), in notebooks/
  and its paired script scripts/notebook_src/ (jupytext);
* the nbgrader source in the grading directory (source/<assignment>/) and the gradebook's
  grade cells (their max_score), which `nbgrader generate_assignment` writes;
* every student's points for the exercise, which `rtp-course grade` writes.

`rtp-course points` shows them side by side, with each check's share of its exercise's
points, and says whom a check added since the last grading re-weights (every student graded
on that exercise). `rtp-course points --write` regenerates the first two from the table and
seals the grader. `rtp-course grade` refuses an assignment whose source disagrees with the
table (`verify_points`), so a table edited alone is never graded with stale points.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from rtp_course.course import BY_MODULE, COURSE, QUIZZES


class PointsChanged(RuntimeError):
    """The course table and what was generated from it disagree; the message says what to run."""


def total() -> int:
    """The course's points: every exercise's, and the quizzes'."""
    return sum(e.points for e in COURSE) + sum(QUIZZES.values())


def disagreements(course: Path, assignments) -> list[str]:
    """Where the grading directory's source notebooks (and gradebook) give an exercise other
    points than the course table."""
    from rtp_course.instructor.assignment import graded_cells
    out = []
    gradebook = _gradebook_max(course)
    for a in assignments:
        for cell in graded_cells(course, a):
            table = BY_MODULE[cell.exercise].points
            if cell.points != table:
                out.append(f"{a}/{cell.notebook}.ipynb's cell {cell.grade_id} gives "
                           f"{cell.points:g} points, the course table {table:g} ({cell.exercise})")
            book = gradebook.get((a, cell.notebook, cell.grade_id))
            if book is not None and book != table:
                out.append(f"the gradebook's cell {cell.grade_id} of {a} is worth {book:g} "
                           f"points, the course table {table:g} ({cell.exercise})")
    return out


def verify_points(course: Path, assignments) -> None:
    found = disagreements(course, assignments)
    if found:
        raise PointsChanged("the course table's points are not those of the assignment:\n  "
                            + "\n  ".join(found) + "\nRegenerate what depends on the table "
                            "(`rtp-course points --write`), then grade every student again.")


def _gradebook_max(course: Path) -> dict:
    """{(assignment, notebook, grade_id): max_score} of the gradebook's grade cells ({} if none)."""
    if not (course / "gradebook.db").exists():
        return {}
    from nbgrader.api import GradeCell
    from rtp_course.instructor.grade_record import gradebook
    with gradebook(course) as gb:
        return {(c.notebook.assignment.name, c.notebook.name, c.name): float(c.max_score)
                for c in gb.db.query(GradeCell).all()}


def check_shares(exercise: str) -> list[tuple[str, bool, float]]:
    """[(check name, hidden, share of the exercise's points)] over its public and hidden checks."""
    from rtp_course.checker import CheckReport
    from rtp_course.checker.registry import check_modules, hidden_dir, load_checks
    checks = load_checks(check_modules([exercise], hidden_dir() is not None))
    weights = {c.name: CheckReport.weight(exercise, c.name) for c in checks}
    unknown = set(dict(BY_MODULE[exercise].weights)) - set(weights)
    if unknown:
        raise PointsChanged(f"the course table weighs checks {exercise} does not have: "
                            f"{', '.join(sorted(unknown))}")
    whole = sum(weights.values()) or 1.0
    return [(c.name, c.hidden, weights[c.name] / whole) for c in checks]


def reweighted(course: Path, exercise: str, names) -> dict:
    """{student/assignment: (added, removed)} of the students whose last grading of `exercise`
    rested on other checks than `names` (a check added or removed since re-weights them)."""
    from rtp_course.instructor.grade_outcome import STATUS, read_status
    out = {}
    for path in sorted((course / "checks").glob(f"*/*/{STATUS}")):
        for grade in (read_status(path) or {}).values():
            if grade.exercise == exercise and grade.names and set(grade.names) != set(names):
                key = f"{path.parent.parent.name}/{path.parent.name}"
                out[key] = (sorted(set(names) - set(grade.names)), sorted(set(grade.names) - set(names)))
    return out


def show(course: Path, log=print) -> int:
    """The table, what the notebooks and the grading directory say, and who needs regrading."""
    notebooks = _notebook_points()
    sources = sorted(p.name for p in (course / "source").glob("*") if p.is_dir())
    log(f"{'exercise':<16} {'notebook':<24} {'table':>5} {'notebook':>8}")
    for ex in COURSE:
        log(f"{ex.module:<16} {ex.notebook:<24} {ex.points:>5g} {notebooks.get(ex.notebook, '-'):>8}")
    for nb, pts in QUIZZES.items():
        log(f"{'(quiz)':<16} {nb:<24} {pts:>5g}")
    log(f"total: {total()} points")
    problems = disagreements(course, sources) + [
        f"notebooks/{ex.notebook}.ipynb gives {notebooks[ex.notebook]:g} points, the table "
        f"{ex.points:g}" for ex in COURSE if notebooks.get(ex.notebook, ex.points) != ex.points]
    for ex in COURSE:
        shares = check_shares(ex.module)
        log(f"\n{ex.module}: {len(shares)} checks; each check's share of {ex.points:g} points:")
        log("  " + ", ".join(f"{n}{' (hidden)' if h else ''} {share * ex.points:.2f}"
                             for n, h, share in shares))
        again = reweighted(course, ex.module, [n for n, _, _ in shares])
        for who, (added, removed) in again.items():
            log(f"  RE-WEIGHTED  {who}: graded before "
                + ", ".join(x for x in (f"{', '.join(added)} was added" if added else "",
                                        f"{', '.join(removed)} was removed" if removed else "") if x)
                + f": grade again (rtp-course grade {who.split('/')[1]} --student {who.split('/')[0]})")
    for p in problems:
        log(f"DIFFERS  {p}")
    if problems:
        log("run `rtp-course points --write` to regenerate them from the table")
    return 1 if problems else 0


def _notebook_points() -> dict:
    """{notebook: points of its grading cell} in the repository's notebooks/."""
    import nbformat
    from rtp_course.instructor import REPOSITORY
    out = {}
    for ex in COURSE:
        path = REPOSITORY / "notebooks" / f"{ex.notebook}.ipynb"
        if path.exists():
            for cell in nbformat.read(path, as_version=4).cells:
                meta = cell.metadata.get("nbgrader", {})
                if meta.get("grade") and f'"{ex.module}"' in cell.source.replace("'", '"'):
                    out[ex.notebook] = float(meta["points"])
    return out


def write(course: Path, log=print) -> int:
    """Set every grading cell's points to the table's, in notebooks/ (and their paired scripts),
    in the grading directory's source and the gradebook; then seal the grader."""
    import nbformat
    from rtp_course.instructor import REPOSITORY, manifest
    changed = []
    for ex in COURSE:
        path = REPOSITORY / "notebooks" / f"{ex.notebook}.ipynb"
        if path.exists() and _set_points(path, ex, nbformat):
            changed.append(path)
    for path in changed:
        log(f"notebooks/{path.name}: the grading cell now gives the table's points")
        _sync_pair(path, log)
        for dest in (course / "source").glob(f"*/{path.name}"):
            shutil.copy2(path, dest)
            _generate(dest.parent.name, log)
    stale = disagreements(course, sorted(p.name for p in (course / "source").glob("*") if p.is_dir()))
    for p in stale:
        log(f"STILL DIFFERS  {p}")
    manifest.seal(course)
    log("sealed the grader; now grade every student of the changed assignments again "
        "(rtp-course grade ASSIGNMENT); prose in a notebook that names the old points is "
        "yours to edit")
    return 1 if stale else 0


def _set_points(path: Path, ex, nbformat) -> bool:
    nb = nbformat.read(path, as_version=4)
    changed = False
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and f'"{ex.module}"' in cell.source.replace("'", '"') \
                and float(meta.get("points", 0)) != ex.points:
            meta["points"] = float(ex.points)
            changed = True
    if changed:
        nbformat.write(nb, path)
    return changed


def _sync_pair(path: Path, log) -> None:
    """The paired percent script follows the notebook (jupytext.toml pairs them)."""
    r = subprocess.run([sys.executable, "-m", "jupytext", "--sync", str(path)],
                       capture_output=True, text=True)
    if r.returncode:
        log(f"jupytext --sync {path.name} failed: {r.stderr.strip()[-300:]}")


def _generate(assignment: str, log) -> None:
    """nbgrader writes the gradebook's grade cells (their max_score) from the source."""
    from rtp_course.instructor import REPOSITORY
    r = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", assignment,
                        "--force"], cwd=REPOSITORY, capture_output=True, text=True)
    log(f"nbgrader generate_assignment {assignment} --force: "
        + ("done" if r.returncode == 0 else f"FAILED: {r.stderr.strip()[-500:]}"))


def cli_points(args) -> int:
    from rtp_course.instructor import grading_dir
    course = grading_dir()
    try:
        return write(course) if args.write else show(course)
    except PointsChanged as e:
        print(f"rtp-course points: {e}", file=sys.stderr)
        return 2

