"""Submissions graded side by side keep to cores of their own: one that starts busy processes
slows only itself (instructor/grade_code.py), and a graded CPU rank cannot leave its cores."""
import os
import time

import pytest

from hostile import hostile, in_all_reduce, run
from rtp_course.confinement import seccomp
from rtp_course.instructor.grade_code import cores_for, grading_pool


@pytest.mark.parametrize("jobs,cores,slots", [
    (2, [0, 1], [[0], [1]]),
    (2, [0, 1, 2, 3], [[0, 1], [2, 3]]),
    (3, [0, 1, 2, 3], [[0], [1], [2, 3]]),
    (4, [0, 1], [[0], [1], [0], [1]]),            # more jobs than cores: shared, in turn
])
def test_each_slot_has_cores_of_its_own_where_there_are_enough(jobs, cores, slots):
    assert [cores_for(s, jobs, cores) for s in range(jobs)] == slots


def _cores_after_a_while():
    time.sleep(0.5)                   # both workers busy at once
    return sorted(os.sched_getaffinity(0))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: nothing to share")
def test_grading_processes_are_on_disjoint_cores():
    with grading_pool(2) as pool:
        got = [f.result() for f in [pool.submit(_cores_after_a_while) for _ in range(2)]]
    assert not set(got[0]) & set(got[1]), got


@pytest.mark.skipif(not seccomp.supported(), reason="no seccomp filter for this architecture")
def test_a_rank_keeps_the_cores_it_was_given(tmp_path):
    """sched_setaffinity and setpriority are refused to a graded CPU rank; unfiltered, it
    took every core of the machine, and its busy processes slowed the grading beside it."""
    probe = ("import os as _os\n"
             "for _what, _do in (('TOOK EVERY CORE', lambda: _os.sched_setaffinity(0, range(_os.cpu_count()))),\n"
             "                   ('RENICED', lambda: _os.setpriority(_os.PRIO_PROCESS, 0, 5))):\n"
             "    try:\n"
             "        _do()\n"
             "        raise RuntimeError(_what)\n"
             "    except PermissionError:\n"
             "        pass")
    results, text = run(hostile(tmp_path, in_all_reduce(probe)), only=("AllReduce",))
    assert results and all(r.passed for r in results), text
