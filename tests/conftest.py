import os
import sys
from pathlib import Path

import pytest

# Worker processes are spawned: keep them from oversubscribing the cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("RTP_COURSE_WARM", "0")   # no warm check server from a test, unless it asks (test_warm.py)
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "helpers"))   # the tests' shared helpers

# The suite runs on three workers (pytest-xdist, `-n 3` in pyproject.toml: on 2 cores a third
# worker fills the time the others wait for ranks to start or a hang to show, about a fifth
# of the suite's time). Tests are handed out
# one by one, except that each module below goes to one worker whole: it builds an expensive
# session fixture (a release, the nbgrader cycle, a Slurm cluster, a training run) once.
SHARED_FIXTURES = {"test_nbgrader_cycle.py", "test_slurm.py", "test_release.py", "test_train.py",
                   "test_bench.py", "test_course_table.py", "test_class_term.py", "test_slurm_autograde.py"}


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerPerSharedModule(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            module = nodeid.split("::", 1)[0]
            return module if Path(module).name in SHARED_FIXTURES else nodeid

    return OneWorkerPerSharedModule(config, log)


# The longest units first (the longest-processing-time rule): a long unit handed out last
# keeps one worker busy after the others have finished (the nbgrader cycle and the Slurm
# module are about 2 minutes each, the proof script's dry run and the checker's full run 1).
FIRST = ("test_nbgrader_cycle.py", "test_slurm.py", "test_gpu_proof.py", "test_checker.py::test_reference_",
         "[06_flyweight_rtp]", "[09_sharding]", "test_correct_alternatives.py::test_correct_alternative_passes_every_check[flyweight")


# Tests marked `stress` run a whole class term, or grade beside busy processes: minutes each,
# on a machine they load on purpose. The README's test command (`pytest -q`, what CI runs)
# skips them; `pytest -q --stress` runs everything. `slow` marks the other end-to-end cases
# (a kernel, a Slurm cluster, an nbgrader cycle): they run by default, `-m "not slow"` skips
# them.
STRESS = ("a stress test (a whole term, autograde as a Slurm array, grading under load): "
          "`pytest --stress` runs it")


def pytest_addoption(parser):
    parser.addoption("--stress", action="store_true",
                     help="also run the stress tests: a class term on Slurm, grading under load")


def pytest_collection_modifyitems(config, items):
    def rank(item):
        return next((i for i, part in enumerate(FIRST) if part in item.nodeid), len(FIRST))
    items.sort(key=rank)   # stable: the rest keep their order
    if not config.getoption("--stress"):
        for item in items:
            if item.get_closest_marker("stress"):
                item.add_marker(pytest.mark.skip(reason=STRESS))
