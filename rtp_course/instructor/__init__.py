"""Instructor-only parts of the course: release, grading, comparison with the reference.

`rtp-course release` never copies this package, so its presence is what makes an
installation the instructor edition. It also says where the instructor material
lives: in the repository this package was installed from (`pip install -e .`), or
where the environment variables below point (a grading machine that installed
the course another way).
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

# nbgrader's gradebook adds submissions through SQLAlchemy's autoflush, which warns on every
# ordinary term ("... not in session, add operation along ... will not proceed"): its own
# noise, not the instructor's concern.
warnings.filterwarnings("ignore", message=r".*not in session, add operation along", module=r"nbgrader\.")

# The instructor repository: rtp_course/instructor/ -> rtp_course/ -> the repository.
REPOSITORY = Path(__file__).resolve().parents[2]
LOCATIONS = {                       # instructor material, relative to REPOSITORY
    "solutions": ("RTP_COURSE_SOLUTIONS", "solutions"),
    "hidden_checks": ("RTP_COURSE_HIDDEN_CHECKS", "tests/hidden"),
    "wrong": ("RTP_COURSE_WRONG_IMPLEMENTATIONS", "tests/wrong"),
}


def location(what: str) -> Path | None:
    """Where instructor material `what` (a key of LOCATIONS) is, or None if it is not here."""
    env, rel = LOCATIONS[what]
    path = Path(os.environ[env]) if os.environ.get(env) else REPOSITORY / rel
    return path if path.is_dir() else None


def hidden_checks_dir() -> Path | None:
    return location("hidden_checks")


def solutions_dir() -> Path | None:
    """The reference solutions (a folder of the exercise modules, not an installed package)."""
    path = location("solutions")
    return path.resolve() if path else None


def grading_dir() -> Path:
    """nbgrader's course directory: ./grading of the repository, or $RTP_COURSE_GRADING_DIR."""
    return Path(os.environ.get("RTP_COURSE_GRADING_DIR", REPOSITORY / "grading")).resolve()
