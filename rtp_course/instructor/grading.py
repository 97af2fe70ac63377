"""Scoring for nbgrader's autograder cells.

A hidden test cell in a notebook ends with `grade("comm")`: it runs
the public and hidden checks of that exercise on the submission's own
exercise modules and returns the points earned. nbgrader takes a number
returned by a test cell as partial credit. Under `nbgrader autograde` (which
sets RTP_COURSE_GRADE_OUTSIDE=1) it awards nothing: `rtp-course grade`
computes the points outside the student's kernel and writes them into the
gradebook (grade_code.py). The points are the course table's
(`rtp_course.course`); the notebook's cell metadata must give the same (a test checks it).

The submission's modules are found next to the notebook: `./rtp_course/`
(an nbgrader assignment folder) or `../rtp_course/` (the student edition's
layout, notebooks in `notebooks/`). $RTP_COURSE_IMPL overrides both.
"""
from __future__ import annotations

import os
from pathlib import Path

from rtp_course import course
from rtp_course.checker import check
from rtp_course.course import EXERCISES


def submission_dir() -> str:
    if os.environ.get("RTP_COURSE_IMPL"):
        return os.environ["RTP_COURSE_IMPL"]
    for cand in (Path.cwd() / "rtp_course", Path.cwd().parent / "rtp_course"):
        if any((cand / f"{m}.py").exists() for m in EXERCISES):
            return str(cand)
    return "rtp_course"


def grading_backend() -> str:
    """Grades are computed on CPU with gloo unless RTP_COURSE_GRADE_BACKEND=nccl: the checker
    applies NCCL's rules on CPU (runtime/nccl), so the grade is the one a GPU run gives."""
    return os.environ.get("RTP_COURSE_GRADE_BACKEND", "gloo")


def grade(exercise: str, points: float | None = None, hidden: bool = True, world_sizes=None,
          timeout_scale: float = 1.0) -> float:
    """Points for `exercise`: its points (default: the course table's) x the fraction of its
    checks that pass."""
    if points is None:
        points = course.exercise(exercise).points
    if os.environ.get("RTP_COURSE_GRADE_OUTSIDE") == "1":
        # Under nbgrader autograde: a notebook cell could have patched this very function, so
        # the points come from `rtp-course grade`, run outside the notebook (grade_code.py).
        print(f"{exercise}: the points for your code ({points:g}) are computed by the checker "
              f"outside this notebook")
        return 0.0
    from rtp_course.checker.registry import hidden_dir
    use_hidden = hidden and hidden_dir() is not None
    rep = check(exercise, impl=submission_dir(), hidden=use_hidden, world_sizes=world_sizes,
                timeout_scale=timeout_scale, grading=True, backend=grading_backend())
    busy = rep.not_graded(exercise)
    if busy:    # left out of the points, never counted as failed (CheckReport.score)
        print(f"{exercise}: {busy} check(s) not graded (the machine was too busy): these points "
              f"count the other checks only; run it again for the rest")
    return round(points * rep.score(exercise), 2)
