"""The watchdog's rules (checker/watchdog.py, DESIGN.md "Budgets: load never changes a
verdict"), driven by a fake clock and the ranks' usage as the test says it: when blocked
ranks are a hang, when a check is too slow, when the machine was too busy to grade it, and
what the hang budget is charged. test_watchdog_usage.py holds how usage is read from /proc."""
import json
from types import SimpleNamespace

import pytest

from rtp_course.checker import budgets as B
from rtp_course.checker import watchdog
from rtp_course.checker.diagnosis import diagnose
from rtp_course.checker.verdict import NOT_GRADED

SAMPLE, STALL = watchdog.SAMPLE, B.STALL


class Rig:
    """One launch of `names` (rotation's checks) on two ranks, watched with a fake clock. The
    ranks' usage is what `blocked`, `starved`, `low` and `cpu` (CPU-s per second) say; `dog.usage`
    is the watchdog's own seam for it (watchdog._Usage reads /proc)."""

    def __init__(self, rundir, names=("rotate",), budgets=None, began=True, parent_busy=None):
        self.rundir, self.now = rundir, 100.0
        self.checks = [SimpleNamespace(id=f"rotation.{n}", exercise="rotation", name=n,
                                       cpu_budget=30.0, hints={}) for n in names]
        self.budgets = budgets or B.Budgets()
        self.blocked, self.starved, self.cpu, self.low = True, False, 0.0, False
        self.ticks, self.changes, self.looked = [], [], None
        self.dog = watchdog.Watchdog(rundir, 2, self.checks, self.budgets, tick=self.ticks.append,
                                     on_change=self.changes.append, parent_busy=parent_busy,
                                     began=lambda: began, clock=lambda: self.now)
        self.dog.usage = self
        self.parent_starved = False
        self.dog.own = SimpleNamespace(starved=lambda dt: self.parent_starved)

    def sample(self, processes, now):
        dt, self.looked = (0.0 if self.looked is None else now - self.looked), now
        return dt, self.cpu * dt, self.blocked, self.starved

    def status(self, rank, index, phase="run", call="wait() on irecv", check=None, **more):
        (self.rundir / f"status.{rank}.json").write_text(json.dumps(
            {"index": index, "check": check or self.checks[index].id, "phase": phase,
             "call": call, **more}))

    def in_check(self, index, **kw):
        for r in (0, 1):
            self.status(r, index, **kw)

    def watch(self, seconds, each=None):
        """Call the watchdog every SAMPLE s for `seconds` (`each(i)` before each call): the
        Stuck it raised (None if none) and the seconds watched until then."""
        start = self.now
        try:
            for i in range(round(seconds / SAMPLE)):
                if each:
                    each(i)
                self.dog([])
                self.now += SAMPLE
        except watchdog.Stuck as stuck:
            return stuck, self.now - start
        return None, self.now - start


@pytest.fixture
def rig(tmp_path, monkeypatch):
    monkeypatch.setattr(watchdog, "STACKS_WAIT", 0.0)   # no rank to write its stack

    def make(**kw):
        made = Rig(tmp_path, **kw)
        made.in_check(0)
        return made
    return make


def test_every_rank_blocked_for_the_stall_with_no_status_changing_is_a_hang(rig):
    r = rig()
    stuck, after = r.watch(3 * STALL)
    assert stuck.reason == "hang" and stuck.check_id == "rotation.rotate", stuck
    assert STALL <= after <= STALL + 2 * SAMPLE, after
    assert "no rank moved" in stuck.why, stuck.why


def test_a_status_change_resets_the_stall(rig):
    """A rank that posts calls is not stalled, however long it stays blocked in all..."""
    r = rig()

    def posting(i):
        if i % round(STALL / 2 / SAMPLE) == 0:
            r.in_check(0, call=f"wait() on irecv #{i}")
    stuck, _ = r.watch(3 * STALL, posting)
    assert stuck is None, stuck.why


def test_blocked_hung_in_all_times_the_stall_in_all_during_a_check_is_a_hang(rig):
    """... until it has been blocked HUNG_IN_ALL x the stall in all: calls posted that never
    complete (a status is the rank's word, it cannot hold a hang off for ever)."""
    r = rig()

    def posting(i):
        if i % round(STALL / 2 / SAMPLE) == 0:
            r.in_check(0, call=f"wait() on irecv #{i}")
    stuck, after = r.watch(2 * watchdog.HUNG_IN_ALL * STALL, posting)
    assert stuck.reason == "hang" and "in all" in stuck.why, stuck
    assert watchdog.HUNG_IN_ALL * STALL <= after <= watchdog.HUNG_IN_ALL * STALL + 2 * SAMPLE


def test_ranks_that_sleep_and_spin_a_little_are_a_hang_not_a_backstop(rig):
    """Every rank above IDLE but under LOW of a CPU (a loop that sleeps 0.1 s and spins 4 ms):
    a hang after LOW_IN_ALL stalls in all, charged one stall; never the backstop, which a
    submission's guard would turn into "not graded"."""
    r = rig()
    r.blocked, r.low, r.cpu = False, True, 0.04
    stuck, after = r.watch(B.BACKSTOP)
    assert stuck is not None and stuck.reason == "hang", stuck
    assert after <= watchdog.LOW_IN_ALL * STALL + 2 * SAMPLE, after
    assert "under 10% of a CPU" in stuck.why
    r.dog.charge(hung=True)
    assert r.budgets.hang_left["rotation"] == pytest.approx(B.HANG_BUDGET - STALL)


def test_ranks_that_compute_or_are_starved_are_never_low(rig):
    r = rig()
    r.blocked, r.low, r.starved, r.cpu = False, True, True, 0.04   # waiting for a CPU
    stuck, _ = r.watch(2 * watchdog.LOW_IN_ALL * STALL)
    assert stuck is None, stuck
    r = rig()
    r.blocked, r.low, r.cpu = False, False, 0.5                      # computing
    stuck, _ = r.watch(2 * watchdog.LOW_IN_ALL * STALL)
    assert stuck is None, stuck


def test_a_hang_found_in_all_costs_the_hang_budget_one_stall(rig):
    r = rig()

    def posting(i):
        if i % round(STALL / 2 / SAMPLE) == 0:
            r.in_check(0, call=f"wait() on irecv #{i}")
    stuck, _ = r.watch(2 * watchdog.HUNG_IN_ALL * STALL, posting)
    assert stuck is not None
    r.dog.charge(hung=True)                       # as group.run_world does after a hang
    assert r.budgets.hang_left["rotation"] == pytest.approx(B.HANG_BUDGET - STALL)
    assert r.budgets.used["rotation.rotate"][1] == pytest.approx(STALL)


def test_a_plain_hang_costs_the_hang_budget_the_time_blocked(rig):
    r = rig()
    stuck, after = r.watch(3 * STALL)
    r.dog.charge(hung=True)
    assert B.HANG_BUDGET - r.budgets.hang_left["rotation"] == pytest.approx(after)


def test_a_plain_hang_after_stalls_that_were_reset_costs_only_its_own_stall(rig):
    """The stalls a status change reset before the hang are not charged: the hang budget pays
    what the hang cost, so that one function's hangs do not spend others' share of it."""
    r = rig()
    reset_until = round(3 * STALL / SAMPLE)

    def posting(i):
        if i < reset_until and i % round(STALL / 2 / SAMPLE) == 0:
            r.in_check(0, call=f"wait() on irecv #{i}")
    stuck, after = r.watch(6 * STALL, posting)
    assert stuck.reason == "hang" and "no rank moved" in stuck.why, stuck
    r.dog.charge(hung=True)
    charged = B.HANG_BUDGET - r.budgets.hang_left["rotation"]
    assert STALL <= charged <= STALL + 3 * SAMPLE, (charged, after)


def test_ranks_waiting_while_the_parent_computes_their_inputs_are_not_hung(rig):
    busy = [True]
    r = rig(parent_busy=lambda: busy[0])
    assert r.watch(3 * STALL) == (None, 3 * STALL)
    busy[0] = False                                # the stall counts from its last look
    stuck, after = r.watch(3 * STALL)
    assert stuck.reason == "hang" and STALL - SAMPLE <= after <= STALL + SAMPLE, (stuck, after)


def test_a_group_blocked_before_any_code_under_test_ran_is_busy_never_hung(tmp_path, monkeypatch):
    """No status yet, and the parent's record says no rank entered the code under test: what
    holds the ranks up is the machine's, "not graded, run it again", never a failing verdict."""
    monkeypatch.setattr(watchdog, "STACKS_WAIT", 0.0)
    r = Rig(tmp_path, began=False)
    stuck, after = r.watch(5 * STALL)
    assert stuck.reason == "busy" and after >= 3 * STALL, (stuck, after)
    assert "not graded, run it again" in stuck.why
    result = diagnose(r.checks[0], 2, tmp_path, stuck, {})
    assert result.status == "busy" and result.status in NOT_GRADED and not result.passed


def test_ranks_that_use_too_much_cpu_to_start_before_any_code_ran_are_busy(tmp_path, monkeypatch):
    """The first check is not failed "too slow" for what the checker's own start used."""
    monkeypatch.setattr(watchdog, "STACKS_WAIT", 0.0)
    r = Rig(tmp_path, began=False)
    r.blocked, r.cpu = False, 2.0
    stuck, after = r.watch(2 * B.START_CPU)
    assert stuck.reason == "busy" and stuck.why.startswith("not graded"), stuck
    assert B.START_CPU / 2 <= after <= B.START_CPU / 2 + 2 * SAMPLE, after


def test_once_the_code_under_test_began_a_group_that_does_not_start_hangs(tmp_path, monkeypatch):
    monkeypatch.setattr(watchdog, "STACKS_WAIT", 0.0)
    stuck, after = Rig(tmp_path, began=True).watch(5 * STALL)
    assert stuck.reason == "hang" and after <= STALL + 2 * SAMPLE, (stuck, after)


def test_ranks_blocked_in_the_checkers_own_steps_hang_after_three_stalls(rig):
    """Every rank says it is in the checker's steps around a check (making its group,
    waiting for the others after it): slow connections under load get time, but the rank's
    word only delays the verdict, never turns a hang into "not graded"."""
    r = rig()
    r.in_check(0, phase="setup", call=None, harness=True)
    stuck, after = r.watch(5 * STALL)
    assert stuck.reason == "hang" and 3 * STALL <= after <= 3 * STALL + 2 * SAMPLE, (stuck, after)
    assert "checker's steps" in stuck.why, stuck.why


def test_one_rank_in_the_harness_and_one_blocked_in_a_call_is_a_hang(rig):
    """Rank 0 waits after the check for rank 1, which is stuck in the code under test."""
    r = rig()
    r.status(0, 0, phase="done", call="waiting for the other ranks", harness=True)
    r.status(1, 0, harness=False)
    stuck, after = r.watch(3 * STALL)
    assert stuck.reason == "hang" and after <= STALL + 2 * SAMPLE, (stuck, after)


def test_ranks_blocked_while_the_grader_waited_for_a_cpu_are_not_hung(rig):
    """The grader's own process serves the ranks' store: while it could not run (its own
    measurement, never a rank's word), blocked ranks may be waiting on it."""
    r = rig()
    r.parent_starved = True
    assert r.watch(3 * STALL) == (None, 3 * STALL)
    r.parent_starved = False
    stuck, after = r.watch(3 * STALL)
    assert stuck.reason == "hang" and after <= STALL + 2 * SAMPLE, (stuck, after)


def test_the_graders_own_wait_for_a_cpu_is_read_from_its_threads():
    own = watchdog._Own()
    assert own.starved(0.0) is False
    assert own.starved(10.0) is False      # this test's process did not wait 5 s for a CPU


def _sleeps_between_calls(r, seconds):
    """Both ranks blocked in check 0, posting a call every 2.8 s (under the stall), for
    `seconds`; then both leave it."""
    def posting(i):
        if i % round(2.8 / SAMPLE) == 0:
            r.in_check(0, call=f"all_gather #{i}")
    stuck, _ = r.watch(seconds, posting)
    for rank in (0, 1):
        r.status(rank, 1)
    r.watch(2 * SAMPLE)
    return stuck


def test_ranks_that_wait_between_their_calls_pay_the_hang_budget_though_the_check_ends(rig):
    """Slow, not hung: no verdict, but the time every rank waited without computing is
    charged to the exercise's hang budget, and the watch says which check waited."""
    r = rig(names=("rotate", "wait_twice"))
    stuck = _sleeps_between_calls(r, 10.0)
    assert stuck is None, stuck.why
    assert r.ticks[:1] == [0] and r.dog.current().id == "rotation.wait_twice"
    assert B.HANG_BUDGET - r.budgets.hang_left["rotation"] == pytest.approx(10.0, abs=1.0)
    assert r.dog.waited["rotation.rotate"] == pytest.approx(10.0, abs=1.0)
    assert r.budgets.used["rotation.rotate"][1] == pytest.approx(10.0, abs=1.0)


@pytest.mark.parametrize("ranks", ["compute", "starved", "harness", "parent_busy"])
def test_time_spent_computing_starved_or_in_the_checkers_steps_is_not_waiting(rig, ranks):
    r = rig(names=("rotate", "wait_twice"), parent_busy=lambda: ranks == "parent_busy")
    if ranks == "compute":
        r.blocked, r.cpu = False, 0.6
    elif ranks == "starved":
        r.blocked, r.starved, r.cpu = False, True, 0.04
    elif ranks == "harness":
        r.in_check(0, harness=True)
    if ranks == "harness":
        stuck, _ = r.watch(2 * STALL)               # (three stalls make a harness hang)
        for rank in (0, 1):
            r.status(rank, 1)
        r.watch(2 * SAMPLE)
    else:
        stuck = _sleeps_between_calls(r, 10.0)
    assert stuck is None, stuck.why
    assert r.dog.waited == {} and r.budgets.hang_left["rotation"] == B.HANG_BUDGET


def test_waiting_that_spends_the_hang_budget_leaves_the_rest_not_run(rig):
    r = rig(names=("rotate", "wait_twice"))
    r.budgets.hang_left["rotation"] = 4.0
    _sleeps_between_calls(r, 6.0)
    assert r.budgets.spent(r.checks[1]) == "hang"
    assert "hung or waited without computing" in r.budgets.why("hang", "rotation")


def test_a_check_past_its_own_cpu_budget_is_too_slow(rig):
    r = rig()
    r.blocked, r.cpu = False, 2.0                  # two ranks, each a CPU
    stuck, after = r.watch(60)
    assert stuck.reason == "own" and "too slow" in stuck.why, stuck
    assert 30.0 / 2 <= after <= 30.0 / 2 + 3 * SAMPLE, after
    assert diagnose(r.checks[0], 2, r.rundir, stuck, {}).status == "failed"


def test_a_check_stopped_by_a_budget_others_spent_is_not_run_not_failed(rig):
    budgets = B.Budgets()
    budgets.left["rotation"] = 10.0                 # the exercise's other checks spent the rest
    r = rig(budgets=budgets)
    r.blocked, r.cpu = False, 2.0
    stuck, _ = r.watch(60)
    assert stuck.reason == "exercise", stuck
    assert diagnose(r.checks[0], 2, r.rundir, stuck, {}).status == "notrun"


def test_a_check_past_the_backstop_on_a_busy_machine_is_not_graded(rig):
    """Its ranks waited for a CPU most of the time: "busy", whatever the code did."""
    r = rig()
    r.blocked, r.starved, r.cpu = False, True, 0.05
    stuck, after = r.watch(2 * B.BACKSTOP)
    assert stuck.reason == "busy" and stuck.why == B.BUSY, stuck
    assert B.BACKSTOP < after <= B.BACKSTOP + 2 * SAMPLE, after
    result = diagnose(r.checks[0], 2, r.rundir, stuck, {})
    assert result.status == "busy" and "run it again" in result.message


def test_a_check_past_the_backstop_that_was_not_starved_is_too_slow(rig):
    r = rig()
    r.blocked, r.starved, r.cpu = False, False, 0.05
    stuck, _ = r.watch(2 * B.BACKSTOP)
    assert stuck.reason == "slow" and "did not finish within" in stuck.why, stuck


def test_ranks_done_with_every_check_have_a_short_backstop_and_are_never_busy(rig):
    r = rig()
    r.in_check(0, phase="done", call=None)
    r.blocked, r.starved, r.cpu = False, True, 0.05
    stuck, after = r.watch(2 * B.BACKSTOP)
    assert stuck.reason == "slow" and after <= B.LEAVING + 2 * SAMPLE, (stuck, after)


def test_the_watch_moves_on_when_every_rank_has_left_a_check_and_charges_it(rig):
    r = rig(names=("rotate", "wait_twice"))
    r.blocked, r.cpu = False, 0.4
    r.watch(2)
    r.status(0, 1)                                  # rank 0 moved on, rank 1 still in check 0
    r.watch(2)
    assert r.ticks == [0] and r.dog.current().id == "rotation.rotate"
    r.status(1, 1, check="rotation.rotate")         # a status naming another check: no move
    r.watch(2)
    assert r.dog.current().id == "rotation.rotate"
    r.status(1, 0, phase="done")                    # left check 0
    r.watch(1)
    assert r.ticks == [0, 1] and r.dog.current().id == "rotation.wait_twice"
    assert r.budgets.used["rotation.rotate"][0] == pytest.approx(0.4 * 6, abs=0.2)
    r.in_check(0)                                   # a status going back moves nothing
    r.watch(1)
    assert r.dog.current().id == "rotation.wait_twice"
    assert len(r.changes) == 5                      # once per change, not per look


def test_a_rank_that_fills_its_disk_cap_is_stopped(rig):
    r = rig()
    r.blocked = False
    r.dog.disk_mb = 1
    (r.rundir / "tmp.1").mkdir()
    (r.rundir / "tmp.1" / "big").write_bytes(b"x" * (2 << 20))
    stuck, _ = r.watch(2)
    assert stuck.reason == "disk" and stuck.rank == 1, stuck
