"""Submissions graded side by side keep to cores of their own: one that starts busy processes
slows only itself (instructor/grade_code.py), and a relay rank cannot leave its cores."""
import os
import time

import pytest

from rtp_course.instructor.grade_code import cores_for, grading_pool
from rtp_course.runtime import seccomp
from test_attacks import needs_landlock
from test_attacks_relay import all_reduce_becomes, comm_run
from test_attacks import hostile


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


@needs_landlock
def test_a_rank_keeps_the_cores_it_was_given(tmp_path):
    if not seccomp.supported():
        pytest.skip("no seccomp filter for this architecture")
    probe = ("import os as _os\n"
             "try:\n"
             "    _os.sched_setaffinity(0, range(_os.cpu_count()))\n"
             "    raise RuntimeError('TOOK EVERY CORE')\n"
             "except PermissionError:\n"
             "    pass\n"
             "dist.all_reduce(out, group=group)")
    results, text = comm_run(hostile(tmp_path, all_reduce_becomes(probe)), world_sizes=(2,))
    assert results and all(r.passed for r in results), text
