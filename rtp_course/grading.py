"""Scoring for nbgrader's autograder cells.

A hidden test cell in a notebook ends with `grade("comm", points=10)`: it runs
the public and hidden checks of that exercise on the submission's own
exercise modules and returns the points earned. nbgrader takes a number
returned by a test cell as partial credit.

The submission's modules are found next to the notebook: `./rtp_course/`
(an nbgrader assignment folder) or `../rtp_course/` (the student edition's
layout, notebooks in `notebooks/`). $RTP_COURSE_IMPL overrides both.
"""
from __future__ import annotations

import os
from pathlib import Path

from rtp_course.checker import check


def submission_dir() -> str:
    if os.environ.get("RTP_COURSE_IMPL"):
        return os.environ["RTP_COURSE_IMPL"]
    for cand in (Path.cwd() / "rtp_course", Path.cwd().parent / "rtp_course"):
        if (cand / "comm.py").exists():
            return str(cand)
    return "rtp_course"


def grade(exercise: str, points: float, hidden: bool = True, world_sizes=None,
          timeout_scale: float = 1.0) -> float:
    """Points for `exercise`: `points` x the fraction of its checks that pass."""
    from rtp_course.checker.registry import hidden_dir
    use_hidden = hidden and hidden_dir() is not None
    rep = check(exercise, impl=submission_dir(), hidden=use_hidden, world_sizes=world_sizes,
                timeout_scale=timeout_scale, grading=True)
    return round(points * rep.score(exercise), 2)
