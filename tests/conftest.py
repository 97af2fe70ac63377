import os
import sys
from pathlib import Path

import pytest

# Worker processes are spawned: keep them from oversubscribing the cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("RTP_COURSE_WARM", "0")   # no warm check server from a test, unless it asks (test_warm.py)
sys.path.insert(0, str(Path(__file__).parent))

# The suite runs on two workers (pytest-xdist, `-n 2` in pyproject.toml). Tests are handed out
# one by one, except that each module below goes to one worker whole: it builds an expensive
# session fixture (a release, the nbgrader cycle, a Slurm cluster, a training run) once.
SHARED_FIXTURES = {"test_nbgrader_cycle.py", "test_slurm.py", "test_release.py", "test_train.py",
                   "test_bench.py", "test_course_table.py"}


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerPerSharedModule(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            module = nodeid.split("::", 1)[0]
            return module if Path(module).name in SHARED_FIXTURES else nodeid

    return OneWorkerPerSharedModule(config, log)


# The longest units first (the longest-processing-time rule): a long unit handed out last
# keeps one worker busy after the other has finished (the nbgrader cycle is about 3 minutes,
# the Slurm module 2, notebook 06 and the checker's full run about 1 each).
FIRST = ("test_nbgrader_cycle.py", "test_slurm.py", "[06_flyweight_rtp]", "test_checker.py::test_reference_")


# Tests marked `slow` are end-to-end cases that each take a kernel, a cluster or a whole grading
# cycle: `pytest -q` (the loop while you work) skips them, `pytest -q --slow` (what CI runs)
# runs everything.
SLOW = "end-to-end, marked slow: `pytest --slow` runs it (CI does)"


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true",
                     help="also run the end-to-end tests marked slow (CI does)")


def pytest_collection_modifyitems(config, items):
    def rank(item):
        return next((i for i, part in enumerate(FIRST) if part in item.nodeid), len(FIRST))
    items.sort(key=rank)   # stable: the rest keep their order
    if not config.getoption("--slow"):
        for item in items:
            if item.get_closest_marker("slow"):
                item.add_marker(pytest.mark.skip(reason=SLOW))
