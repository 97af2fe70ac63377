"""A hang or an endless loop in one function costs only the checks that call it: every other
check of the exercise runs and passes, end to end (ranks, watchdog, budgets). The engine's
bookkeeping is held without processes in tests/unit/test_engine_budgets.py."""
import pytest

from rtp_course.checker import engine, report
from wrongs import NAPS, SLEEPS, SPINS, WAITS, WAITS_POSTING, reduce_scatter_starting_with

CALLERS = ("ring_reduce_scatter", "subgroup")     # the checks that call ring_reduce_scatter


def rotation_with(tmp_path, first_lines: str):
    """The reference rotation.py with `first_lines` at the top of ring_reduce_scatter."""
    impl = tmp_path / "impl"
    impl.mkdir()
    (impl / "rotation.py").write_text(reduce_scatter_starting_with(first_lines))
    return impl


def graded(impl, **kw):
    """The checks' results, run again while the machine was too busy for some (as a student
    is told to): what is judged here is the verdict, never the machine's load."""
    for _ in range(3):
        results = engine.run(["rotation"], impl=str(impl), timeout_scale=0.25, **kw)
        if not any(r.status == "busy" for r in results):
            return results, report.text(results)
    pytest.skip("the machine was too busy to grade three times in a row")


# spins and posting: their rules are unit-tested (test_engine_budgets, test_watchdog_rules)
@pytest.mark.parametrize("bug", [
    WAITS, NAPS, pytest.param(SPINS, marks=pytest.mark.extended, id="spins"),
    pytest.param(WAITS_POSTING, marks=pytest.mark.extended, id="posting")],
    ids=["waits", "naps", "spins", "posting"])
def test_only_the_checks_calling_the_broken_function_fail(tmp_path, bug):
    results, text = graded(rotation_with(tmp_path, bug), world_sizes=(2, 3))
    broken = [r for r in results if r.check.startswith(CALLERS)]
    rest = [r for r in results if not r.check.startswith(CALLERS)]
    assert rest and all(r.passed for r in rest), text
    assert broken and not any(r.passed for r in broken), text
    first = [r for r in broken if r.world_size == 2]
    said = "too slow" if bug == SPINS else "deadlock"
    assert all(said in r.message for r in first), text
    at_2 = {r.check for r in first}
    assert all("not run: it did not finish at world size 2" in r.message
               for r in broken if r.world_size == 3 and r.check in at_2), text
    assert "may follow from" not in text and "NOT RUN" not in text, text



def test_a_function_that_sleeps_under_the_stall_spends_only_its_own_checks_time(tmp_path):
    """Slow, not hung (a red team's sleeper): each call waits under the stall, so no check
    hangs, but the waiting is charged to the exercise's hang budget: the sleeping function's
    checks pass slowly or are not run (grading fails those after its last round), and every
    other check runs, after them, and passes."""
    results, text = graded(rotation_with(tmp_path, SLEEPS), world_sizes=(2, 3))
    broken = [r for r in results if r.check.startswith(CALLERS)]
    rest = [r for r in results if not r.check.startswith(CALLERS)]
    assert rest and all(r.passed for r in rest), text
    # each of its checks waited (charged), hung once the budget left less than a sleep, or
    # was not run for the budget it spent
    assert broken and all(r.spent_budgets or r.status == "notrun" for r in broken), text
    assert all(r.details["waited"] >= 0.5 for r in broken if r.passed), text
