"""Load never changes a verdict: the same verdicts with three busy processes per core beside
the checker as on a quiet machine (budgets are CPU time; a hang is every rank blocked, not a
wall-clock timeout; a check the machine is too busy to finish is "not graded", never failed).

On the wall-clock budgets this replaced, with the load at 9 to 14 on 2 cores, correct
flyweight alternatives failed "too slow: ... 45 s in all" and the reference lost points to
"rank 0 never started this check"."""
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from rtp_course.checker import engine, report
from wrongs import ROOT, impl_with, spec

pytestmark = pytest.mark.stress


def _spin():
    signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
    while True:
        pass


@pytest.fixture
def busy_machine():
    """Three busy processes per core, for the test's duration."""
    cores = len(os.sched_getaffinity(0))
    ctx = multiprocessing.get_context("fork")
    spinners = [ctx.Process(target=_spin, daemon=True) for _ in range(3 * cores)]
    for p in spinners:
        p.start()
    time.sleep(1.0)
    yield len(spinners)
    for p in spinners:
        p.terminate()
    for p in spinners:
        p.join(5)


def test_the_reference_passes_every_check_on_a_busy_machine(busy_machine):
    r = subprocess.run([sys.executable, "-m", "rtp_course.cli", "check", "--hidden",
                        "--impl", "solutions"], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "RTP_COURSE_WARM": "0"}, timeout=1500)
    busy = r.stdout.count("BUSY")
    assert r.returncode == 0 or busy, r.stdout[-4000:] + r.stderr[-2000:]
    assert "FAIL" not in r.stdout and "HANG" not in r.stdout and "ERROR" not in r.stdout, r.stdout


CASES = ["tests/correct/flyweight/simple_recompute.py", "tests/correct/rotation/wait_by_polling.py",
         "tests/wrong/rotation/blocking_send_first.py", "tests/wrong/rotation/async_blocks.py",
         "tests/wrong/data_parallel/recv_without_send.py",
         "tests/wrong/tensor_parallel/embedding_gathers_on_the_world.py"]


@pytest.mark.parametrize("case", CASES, ids=[c.split("/", 1)[1] for c in CASES])
def test_verdicts_are_those_of_a_quiet_machine(case, busy_machine, tmp_path):
    path = ROOT / case
    s = spec(path) if "/wrong/" in case else {"world_sizes": None, "only": None,
                                              "hidden": True, "expect": None}
    impl = impl_with(path, tmp_path / "impl")
    results = engine.run([path.parent.name], impl=str(impl), world_sizes=s["world_sizes"],
                         only=s["only"], hidden=s["hidden"])
    text = report.text(results)
    graded = [r for r in results if r.status != "busy"]
    if s["expect"] is None:
        assert all(r.passed for r in graded), text
    else:
        assert not all(r.passed for r in graded), text
        assert re.search(s["expect"], text, re.S), text
