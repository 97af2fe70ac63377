"""checker/budgets.py: the CPU-time budgets of one run, by themselves. Which budget limits a
check, what a stall is, what each charge takes from, which spent budget stops an exercise,
and the sentence that names the checks that spent a shared one."""
from types import SimpleNamespace

import pytest

from rtp_course.checker import budgets as B


def check(name="rotate", exercise="rotation", cpu_budget=30.0):
    return SimpleNamespace(id=f"{exercise}.{name}", exercise=exercise, cpu_budget=cpu_budget)


def test_the_smallest_budget_limits_a_check_and_is_named():
    budgets = B.Budgets()
    assert budgets.limit(check()) == (30.0, "own")
    budgets.left["rotation"] = 12.0
    assert budgets.limit(check()) == (12.0, "exercise")
    budgets.run_left = 5.0
    assert budgets.limit(check()) == (5.0, "run")


def test_scale_multiplies_every_budget_and_the_stall():
    budgets = B.Budgets(scale=2.0)
    assert budgets.limit(check()) == (60.0, "own")
    assert budgets.left["rotation"] == 2 * B.EXERCISE_CPU and budgets.run_left == 2 * B.RUN_CPU
    assert budgets.stall == 2 * B.STALL and budgets.backstop == 2 * B.BACKSTOP
    assert budgets.hang_left["rotation"] == 2 * B.HANG_BUDGET


def test_a_timeout_is_every_checks_own_budget_and_lifts_the_shared_ones():
    budgets = B.Budgets(timeout=500.0)
    assert budgets.limit(check()) == (500.0, "own")
    assert budgets.left["rotation"] == float("inf") and budgets.run_left == float("inf")
    assert budgets.backstop == 4 * 500.0


def test_a_stall_is_never_longer_than_the_hang_budget_left_nor_under_a_second():
    budgets = B.Budgets()
    assert budgets.stall_for(check()) == B.STALL
    budgets.hang_left["rotation"] = 2.5
    assert budgets.stall_for(check()) == 2.5
    budgets.hang_left["rotation"] = -3.0
    assert budgets.stall_for(check()) == 1.0


def test_a_charge_takes_from_the_exercise_the_hang_budget_and_the_run():
    budgets = B.Budgets()
    budgets.charge(check(), 10.0, hung=4.0)
    budgets.charge(check(), 5.0)
    assert budgets.used["rotation.rotate"] == (15.0, 4.0)
    assert budgets.left["rotation"] == B.EXERCISE_CPU - 15.0
    assert budgets.hang_left["rotation"] == B.HANG_BUDGET - 4.0
    assert budgets.run_left == B.RUN_CPU - 15.0
    budgets.charge_run(1.0)                       # starting, importing: the run's alone
    assert budgets.run_left == B.RUN_CPU - 16.0 and budgets.left["rotation"] == B.EXERCISE_CPU - 15.0


def test_which_spent_budget_stops_an_exercise_hang_first():
    budgets = B.Budgets()
    assert budgets.spent(check()) is None
    budgets.run_left = 0.0
    assert budgets.spent(check()) == "run"
    budgets.left["rotation"] = 0.0
    assert budgets.spent(check()) == "exercise"
    budgets.hang_left["rotation"] = 0.0
    assert budgets.spent(check()) == "hang"
    assert budgets.spent(check("Duplication", "comm")) == "run"


def test_the_shared_budgets_sentence_names_the_three_that_spent_most_of_it():
    budgets = B.Budgets()
    for name, cpu in (("a", 40.0), ("b", 21.0), ("c", 3.0), ("d", 9.0), ("tiny", 0.4)):
        budgets.charge(check(name), cpu)
    budgets.charge(check("Duplication", "comm"), 50.0)
    assert budgets.spenders("rotation") == "a (40 CPU-s), b (21 CPU-s), d (9 CPU-s)"
    assert budgets.spenders() == "Duplication (50 CPU-s), a (40 CPU-s), b (21 CPU-s)"
    assert budgets.why("exercise", "rotation") == (
        f"checks of rotation used the {B.EXERCISE_CPU:.0f} CPU-seconds an exercise's checks "
        f"may use in all, most of it a (40 CPU-s), b (21 CPU-s), d (9 CPU-s)")
    assert budgets.why("run").startswith(f"checks of this run used the {B.RUN_CPU:.0f}")


def test_the_hang_budgets_sentence_names_the_checks_that_hung():
    budgets = B.Budgets()
    budgets.charge(check("a"), 1.0, hung=6.0)
    budgets.charge(check("b"), 30.0, hung=0.0)
    assert budgets.why("hang", "rotation") == (
        f"checks of rotation hung or waited without computing for {B.HANG_BUDGET:.0f} s in "
        f"all (an exercise's hang budget), most of it a (6 s hung or waiting)")


def test_a_checks_own_budget_says_too_slow_with_what_it_used():
    assert B.Budgets().why("own", "rotation", 31.25, 30.0) == (
        "too slow: its ranks used 31.2 CPU-seconds, and this check allows 30")


@pytest.mark.parametrize("reason", ["hang", "exercise", "run"])
def test_a_shared_budget_is_never_said_to_be_too_slow(reason):
    assert "too slow" not in B.Budgets().why(reason, "rotation", 99.0, 30.0)
