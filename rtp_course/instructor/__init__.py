"""Instructor-only parts of the course: release, grading, review of a class's code.

`rtp-course release` never copies this package, so its presence is what makes an
installation the instructor edition. Where the instructor material lives is
course/material.py's to say (the checker and confinement ask there too); re-exported here.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

# Where the material lies: course/material.py, which the checker and confinement ask too.
from rtp_course.course.material import (LOCATIONS, REPOSITORY, hidden_checks_dir,  # noqa: F401
                                        location, solutions_dir)

# nbgrader's gradebook adds submissions through SQLAlchemy's autoflush, which warns on every
# ordinary term ("... not in session, add operation along ... will not proceed"): its own
# noise, not the instructor's concern.
warnings.filterwarnings("ignore", message=r".*not in session, add operation along", module=r"nbgrader\.")


def grading_dir() -> Path:
    """nbgrader's course directory: ./grading of the repository, or $RTP_COURSE_GRADING_DIR."""
    return Path(os.environ.get("RTP_COURSE_GRADING_DIR", REPOSITORY / "grading")).resolve()
