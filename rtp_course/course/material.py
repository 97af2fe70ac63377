"""Where the instructor edition keeps what students never get: the reference solutions, the
hidden checks, the wrong implementations. None for each in the student edition.

The checker (hidden checks, the comparison with the reference), `--impl solutions` and the
confinement of graded ranks (which closes these folders to the code under test) ask here,
below the `instructor` package they must not import; the instructor's tools re-export it.
The material lies in the repository the package was installed from (`pip install -e .`),
or where the environment variables below point (a grading machine that installed the course
another way).
"""
from __future__ import annotations

import os
from pathlib import Path

from rtp_course.course import edition

# The instructor repository: rtp_course/course/ -> rtp_course/ -> the repository.
REPOSITORY = Path(__file__).resolve().parents[2]
LOCATIONS = {                       # instructor material, relative to REPOSITORY
    "solutions": ("RTP_COURSE_SOLUTIONS", "solutions"),
    "hidden_checks": ("RTP_COURSE_HIDDEN_CHECKS", "tests/hidden"),
    "wrong": ("RTP_COURSE_WRONG_IMPLEMENTATIONS", "tests/wrong"),
}


def location(what: str) -> Path | None:
    """Where instructor material `what` (a key of LOCATIONS) is, or None if it is not here
    (always None in the student edition, whatever lies beside it)."""
    if edition() != "instructor":
        return None
    env, rel = LOCATIONS[what]
    path = Path(os.environ[env]) if os.environ.get(env) else REPOSITORY / rel
    return path if path.is_dir() else None


def hidden_checks_dir() -> Path | None:
    return location("hidden_checks")


def solutions_dir() -> Path | None:
    """The reference solutions (a folder of the exercise modules, not an installed package)."""
    path = location("solutions")
    return path.resolve() if path else None


def closed_to_code_under_test() -> list[str]:
    """The folders a confined rank must not read: the hidden checks and the reference."""
    return [str(d) for d in (hidden_checks_dir(), solutions_dir()) if d is not None]
