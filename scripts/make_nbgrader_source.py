#!/usr/bin/env python3
"""Lay out nbgrader's source folder from notebooks/: by default one assignment per graded notebook.

    python scripts/make_nbgrader_source.py                       # every graded notebook of the course table
    python scripts/make_nbgrader_source.py 02_data_parallel      # only these notebooks
    python scripts/make_nbgrader_source.py --as part1 02_data_parallel 03_tp_communication

writes, in the course directory of nbgrader_config.py (./grading or $RTP_COURSE_GRADING_DIR),

    source/<assignment>/<notebook>.ipynb        the nbgrader source notebook(s), hidden tests included
    source/<assignment>/rtp_course/<ex>.py      the exercise stubs, as in the student edition

The stubs make the assignment folder the same shape as a submission (notebook next to
rtp_course/), which is where grade() looks; nbgrader_config.py keeps autograde from
copying them over the student's modules (Autograde.exclude_overwriting).
An assignment folder that exists is replaced. Then: nbgrader generate_assignment <assignment>.
"""
import argparse
import shutil
import sys
from pathlib import Path

from rtp_course.course import COURSE, EXERCISES, GRADED_NOTEBOOKS, QUIZZES
from rtp_course.instructor import REPOSITORY as ROOT, grading_dir as course_dir


def make_assignment(course: Path, name: str, notebooks: list, stubs: Path = ROOT / "rtp_course") -> Path:
    folder = course / "source" / name
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "rtp_course").mkdir(parents=True)
    for nb in notebooks:
        shutil.copy2(nb, folder / nb.name)
    for ex in EXERCISES:
        if (stubs / f"{ex}.py").exists():
            shutil.copy2(stubs / f"{ex}.py", folder / "rtp_course" / f"{ex}.py")
    return folder


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("names", nargs="*", metavar="NOTEBOOK", help="notebook stems (default: every graded one)")
    p.add_argument("--as", dest="group", metavar="ASSIGNMENT",
                   help="put the named notebooks into ONE assignment of this name")
    p.add_argument("--notebooks", type=Path, default=ROOT / "notebooks", help="source notebooks")
    p.add_argument("--course", type=Path, default=None, help="course directory (default: nbgrader_config.py's)")
    args = p.parse_args(argv)
    course = (args.course or course_dir()).resolve()
    found = {nb.stem: nb for nb in sorted(args.notebooks.glob("*.ipynb"))}
    missing = [n for n in args.names if n not in found]
    if missing:
        print(f"no such notebook in {args.notebooks}: {', '.join(missing)}", file=sys.stderr)
        return 2
    chosen = [found[n] for n in args.names] if args.names else [found[n] for n in GRADED_NOTEBOOKS if n in found]
    if not chosen:
        print(f"no graded notebooks in {args.notebooks}", file=sys.stderr)
        return 2
    plan = {args.group: chosen} if args.group else {nb.stem: [nb] for nb in chosen}
    for name, nbs in plan.items():
        folder = make_assignment(course, name, nbs)
        print(f"{folder}: {', '.join(nb.name for nb in nbs)} + rtp_course/ stubs, "
              f"{points_of([nb.stem for nb in nbs]):g} points")
    print(f"{sum(points_of([nb.stem for nb in nbs]) for nbs in plan.values()):g} points in all "
          f"(the course: {sum(points_of([n]) for n in GRADED_NOTEBOOKS):g})")
    # nbgrader takes one assignment per command
    print("next:\n" + "\n".join(f"    nbgrader generate_assignment {a}" for a in plan))
    return 0


def points_of(notebooks) -> float:
    """The course table's points of these notebooks: their exercises' and quizzes'."""
    return sum(e.points for e in COURSE if e.notebook in notebooks) + \
        sum(QUIZZES.get(n, 0) for n in notebooks)


if __name__ == "__main__":
    sys.exit(main())
