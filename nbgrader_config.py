"""nbgrader configuration of rtp-course (instructor edition): run nbgrader from this directory.

Course directory (default ./grading, or $RTP_COURSE_GRADING_DIR), one assignment
per graded notebook (docs/INSTRUCTORS.md has the commands):

    grading/source/<assignment>/<notebook>.ipynb          scripts/make_nbgrader_source.py writes these,
    grading/source/<assignment>/rtp_course/<exercise>.py  with the six exercise stubs
    grading/submitted/<student>/<assignment>/...          the same layout, the student's files
                                                          (scripts/collect_submissions.py)
    grading/autograded/<student>/<assignment>/            where the kernel runs the hidden checks

The hidden test cells call `grade("comm", points=10)` (rtp_course/grading.py), which
runs the public and hidden checks of that exercise on ./rtp_course of the
autograded folder: the student's own modules, next to the notebook.
"""
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GRADING = Path(os.environ.get("RTP_COURSE_GRADING_DIR", HERE / "grading")).resolve()
EXERCISES = ("data_parallel", "comm", "tensor_parallel", "rotation", "flyweight", "groups")
TIMEOUT_SCALE = 1.0     # the timeout_scale the grade() cells pass (they use the default)
LAUNCH_SECONDS = 20     # starting a worker group again after a failed check, on a busy 2-core node

c = get_config()  # noqa: F821  (nbgrader provides it)
c.CourseDirectory.root = str(GRADING)
c.CourseDirectory.course_id = "rtp-course"

# Autograde copies every non-notebook file of the source assignment over the
# submission (nbgrader 0.9.6): the source holds the stubs, so keep the student's.
source = GRADING / "source"
assignments = sorted(p.name for p in source.iterdir() if p.is_dir()) if source.is_dir() else []
c.Autograde.exclude_overwriting = {a: [f"rtp_course/{m}.py" for m in EXERCISES] for a in assignments}

# The hidden checks of THIS repository, even where the course is installed without -e.
os.environ.setdefault("RTP_COURSE_HIDDEN_CHECKS", str(HERE / "tests" / "hidden"))
# nbgrader runs `alembic` from PATH when it creates the gradebook.
os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])

# The kernel's working directory is the submission. Its rtp_course/ (the student's
# exercise modules, no __init__.py) must not shadow the installed course package,
# neither in the kernel nor in the checker's worker processes (whose `python -c`
# forkserver puts the working directory first on sys.path): PYTHONSAFEPATH keeps
# it off sys.path (Python 3.11+); the grade cells load the modules by path anyway.
os.environ["PYTHONSAFEPATH"] = "1"
c.Execute.extra_arguments = [
    "--HistoryManager.hist_file=:memory:",
    "--IPKernelApp.ignore_cwd=True",
    # nbgrader scores a test cell 0 if it wrote to stderr: low-level output of the
    # worker processes (gloo, torch warnings) goes to nbgrader's log instead of the cell.
    "--IPKernelApp.capture_fd_output=False",
]


def cell_timeout() -> int:
    """Seconds one grade() cell may take in the worst case: every check of its exercise, at
    every world size, stopped by the checker's own deadlock timeout and relaunched. grade()
    always returns within this; the cell timeout is only the backstop (a timed-out cell scores 0)."""
    from rtp_course.checker.engine import DEFAULT_WORLD_SIZES
    from rtp_course.checker.registry import check_modules, hidden_dir, load_checks
    worst = 0.0
    for ex in EXERCISES:
        checks = load_checks(check_modules([ex], hidden=hidden_dir() is not None))
        worst = max(worst, sum(ch.timeout * TIMEOUT_SCALE + LAUNCH_SECONDS
                               for ch in checks for ws in DEFAULT_WORLD_SIZES if ch.applies(ws)))
    return int(worst) + 120


c.Execute.timeout = cell_timeout()
