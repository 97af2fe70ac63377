"""nbgrader configuration of rtp-course (instructor edition): run nbgrader from this directory.

Course directory (default ./grading, or $RTP_COURSE_GRADING_DIR), one assignment
per graded notebook (docs/INSTRUCTORS.md has the commands):

    grading/source/<assignment>/<notebook>.ipynb          scripts/make_nbgrader_source.py writes these,
    grading/source/<assignment>/rtp_course/<exercise>.py  with the exercise stubs
    grading/submitted/<student>/<assignment>/...          the same layout, the student's files
                                                          (scripts/collect_submissions.py)
    grading/autograded/<student>/<assignment>/            where the kernel runs the hidden checks

The notebooks run in a confined kernel; their grading cells award nothing while
autograding. `rtp-course grade ASSIGNMENT`, run after the notebooks' autograde
(`rtp-course autograde ASSIGNMENT`: nbgrader autograde, several students at once),
runs the public and hidden checks on each student's collected modules
(grading/submitted/<student>/<assignment>/rtp_course) and writes the points into
the gradebook (rtp_course/instructor/grade_code.py).
"""
import os
import sys
from pathlib import Path

from rtp_course.course import EXERCISES
from rtp_course.instructor import grading_dir

HERE = Path(__file__).resolve().parent
GRADING = grading_dir()

c = get_config()  # noqa: F821  (nbgrader provides it)
c.CourseDirectory.root = str(GRADING)
c.CourseDirectory.course_id = "rtp-course"

# Autograde copies every non-notebook file of the source assignment over the
# submission (nbgrader 0.9.6): the source holds the stubs, so keep the student's.
source = GRADING / "source"
assignments = sorted(p.name for p in source.iterdir() if p.is_dir()) if source.is_dir() else []
c.Autograde.exclude_overwriting = {a: [f"rtp_course/{m}.py" for m in EXERCISES] for a in assignments}

# The hidden checks of THIS repository, even where the course is installed without -e.
os.environ.setdefault("RTP_COURSE_HIDDEN_CHECKS", str(HERE / "tests" / "hidden"))  # see rtp_course.instructor
# Students' notebooks run in a kernel that confines itself (Landlock) before any cell runs:
# it reads the Python installation and the course package, writes only the submission folder
# (rtp_course/instructor/confined_kernel.py). Its kernelspec lives in the course directory.
from rtp_course.instructor.confined_kernel import KERNEL_NAME, write_kernelspec  # noqa: E402

write_kernelspec(GRADING / ".jupyter")
os.environ["JUPYTER_PATH"] = os.pathsep.join(
    p for p in (str(GRADING / ".jupyter"), os.environ.get("JUPYTER_PATH", "")) if p)
c.Execute.kernel_name = KERNEL_NAME

# A grading cell with hidden tests always logs "Attribute 'checksum' ... has changed!" (the
# release gave the student the checksum of the cell without them); autograde restores the
# cell all the same. That warning is dropped for those cells only (instructor/autograde.py).
from rtp_course.instructor.autograde import quiet_known_noise  # noqa: E402

quiet_known_noise(source)

# The notebook's grading cells award nothing while autograding (a cell could have patched
# grade()): `rtp-course grade ASSIGNMENT`, run after autograde, writes the points for code.
os.environ["RTP_COURSE_GRADE_OUTSIDE"] = "1"
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

# The longest cells are demos and a short training run (about a minute on 2 cores); the
# grading cells return at once while autograding. A cell past this limit scores 0.
c.Execute.timeout = 600
# On a loaded machine (a class's autograde beside other jobs) a kernel has taken over
# nbclient's 60 s to start, and its last output of a cell may come seconds after the cell's
# reply: nbgrader raises past iopub_timeout (4 s), failing the whole notebook of the student.
c.Execute.startup_timeout = 300
c.Execute.iopub_timeout = 120

# Students' outputs are made inert (rtp_course/instructor/safe_outputs.py): a cell that displays
# HTML, JavaScript, SVG, a widget or Markdown would otherwise run its script in the browser of
# whoever reads formgrader's pages or the feedback. Autograde keeps only escaped text and base64
# images of the outputs it has just executed; generate_feedback does so again before rendering.
from nbgrader.converters import Autograde, GenerateFeedback  # noqa: E402
from nbgrader.preprocessors import LimitOutput  # noqa: E402

from rtp_course.instructor.safe_outputs import SafeOutputs  # noqa: E402


_autograde = Autograde.class_traits()["autograde_preprocessors"].default()
_autograde.insert(_autograde.index(LimitOutput) + 1, SafeOutputs)   # before SaveAutoGrades
c.Autograde.autograde_preprocessors = _autograde
c.GenerateFeedback.preprocessors = [SafeOutputs] + GenerateFeedback.class_traits()["preprocessors"].default()
