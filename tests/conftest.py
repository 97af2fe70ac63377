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
                   "test_bench.py", "test_course_table.py", "test_class_term.py", "test_slurm_autograde.py",
                   "test_class_grades.py"}


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
         "[06_flyweight_rtp]", "[09_sharding]", "passes_every_check_at_every_world_size[flyweight",
         "passes_every_check_as_graded[flyweight", "test_one_function_hangs.py",
         "test_safe_outputs.py::test_autograde_and", "test_leftovers.py::test_grading_a_hostile",
         "test_release.py", "test_grade_rounds.py")


# Three tiers. The README's test command (`pytest -q`) runs the default tier, in about 10
# minutes on 2 cores. `--extended` adds what repeats its evidence at more cost (each correct
# alternative at 1, 3 and 4 ranks besides 2 confined; each notebook run top to bottom, with the
# reference and with the stubs, where the default tier's nbgrader cycle runs their grading
# cells; a real Slurm cluster; the GPU proof script's dry run): CI runs it after the README's command
# (.ci/run). `--stress` adds a whole class term and grading beside busy processes: minutes
# each, on a machine they load on purpose. `slow` marks the end-to-end cases of the default
# tier (a kernel, an nbgrader cycle): `-m "not slow"` skips them.
STRESS = ("a stress test (a whole term, autograde as a Slurm array, grading under load): "
          "`pytest --stress` runs it")
EXTENDED = "the extended tier (CI runs it after the README's test command): `pytest --extended` runs it"
EXTENDED_FIXTURES = {"slurm_cluster", "dry_run"}   # a real Slurm cluster, the proof's dry run


def pytest_addoption(parser):
    parser.addoption("--stress", action="store_true",
                     help="also run the stress tests: a class term on Slurm, grading under load")
    parser.addoption("--extended", action="store_true",
                     help="also run the extended tier: what CI runs after the default tier")


def pytest_collection_modifyitems(config, items):
    def rank(item):
        return next((i for i, part in enumerate(FIRST) if part in item.nodeid), len(FIRST))
    items.sort(key=rank)   # stable: the rest keep their order
    for item in items:
        if EXTENDED_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.extended)
        if item.get_closest_marker("stress") and not config.getoption("--stress"):
            item.add_marker(pytest.mark.skip(reason=STRESS))
        elif item.get_closest_marker("extended") and not (config.getoption("--extended")
                                                          or config.getoption("--stress")):
            item.add_marker(pytest.mark.skip(reason=EXTENDED))
