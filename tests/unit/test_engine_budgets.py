"""The engine's budgets, without processes: a launch is simulated (each check either passes
cheaply or spins until a budget stops it, as the watchdog would), so what is judged here is
the engine's bookkeeping: a check that spins costs only its own verdict, checks a shared
budget left no time for are run again with fresh budgets, and nothing is failed or blamed
by association."""
import pytest

from rtp_course.checker import budgets as B
from rtp_course.checker import diagnosis, engine
from rtp_course.checker.group import over_budget
from rtp_course.checker.verdict import Result


class Launches:
    """Stands in for group.run_world: `spins` are the check names whose code never returns."""

    def __init__(self, spins=()):
        self.spins, self.runs = set(spins), []

    def __call__(self, todo, ws, impl_dir, modules, dtype, budgets, backend, tick=None,
                 expect=None, confine=False):
        self.runs.append((ws, [c.name for c in todo]))
        results = []
        for i, c in enumerate(todo):
            if budgets.spent(c):                  # the group stops; the rest are not run
                results += [over_budget(d, ws, budgets) for d in todo[i:]]
                break
            if c.name not in self.spins:
                budgets.charge(c, 0.5)
                results.append(Result(c.exercise, c.name, ws, "passed"))
                continue
            limit, reason = budgets.limit(c)      # the watchdog stops it at its limit
            budgets.charge(c, limit + 0.1)
            why = budgets.why(reason, c.exercise, limit + 0.1, limit)
            if reason in ("exercise", "run"):
                results.append(Result(c.exercise, c.name, ws, "notrun", f"not run to the end: {why}"))
            else:
                results.append(Result(c.exercise, c.name, ws, "failed", why,
                                      details={"stopped": reason}))
        return results, {}


@pytest.fixture
def launches(monkeypatch):
    def use(spins=()):
        fake = Launches(spins)
        monkeypatch.setattr(engine, "run_world", fake)
        monkeypatch.setattr(engine, "Expectations", lambda pairs: type("E", (), {"close": lambda s: None})())
        monkeypatch.setattr(engine, "_compare_with_reference", lambda *a, **k: None)
        return fake
    return use


def verdicts(results):
    return {(r.check, r.world_size): r.status for r in results}


def test_a_function_that_spins_fails_only_its_own_checks(launches):
    """ring_reduce_scatter spins: its three checks fail at the first world size and are not run
    at the larger ones; every other check of the exercise runs and passes."""
    fake = launches({"ring_reduce_scatter", "ring_reduce_scatter_float16", "ring_reduce_scatter_float32"})
    results = engine.run(["rotation"], impl="solutions", hidden=True)
    spun = [r for r in results if r.check.startswith("ring_reduce_scatter")]
    rest = [r for r in results if not r.check.startswith("ring_reduce_scatter")]
    assert rest and all(r.passed for r in rest), [r for r in rest if not r.passed]
    assert spun and all(r.status == "failed" for r in spun)
    first = min(r.world_size for r in spun)
    assert all("too slow" in r.message for r in spun if r.world_size == first)
    assert all("not run: it did not finish at world size" in r.message
               for r in spun if r.world_size > first)
    assert not any(name.startswith("ring_reduce_scatter") for ws, names in fake.runs
                   if ws > first for name in names)


def test_checks_a_shared_budget_left_no_time_for_are_run_again_not_failed(launches, monkeypatch):
    """So many checks spin that the exercise's budget runs out: the checks it left no time for
    are "not run", then run again with fresh budgets; none of the honest ones fails."""
    monkeypatch.setattr(B, "EXERCISE_CPU", 45.0)      # two spinning checks of 20 CPU-s, and a bit
    spins = {"rotate_uneven", "ring_all_gather", "ring_all_gather_float32"}
    fake = launches(spins)
    results = engine.run(["rotation"], impl="solutions", hidden=True)
    honest = [r for r in results if r.check not in spins]
    assert all(r.passed for r in honest), [(r.check, r.world_size, r.message) for r in honest
                                           if not r.passed]
    assert not any(r.status == "notrun" for r in results), verdicts(results)
    first = {name: min(r.world_size for r in results if r.check == name) for name in spins}
    assert all(r.status == "failed" and "too slow" in r.message for r in results
               if r.check in spins and r.world_size == first[r.check])
    assert len(fake.runs) > 4           # a second pass ran what the first left


def test_what_is_still_not_run_is_not_graded_and_blames_nothing(launches, monkeypatch):
    """Every check spins and each pass's budget lasts for one: what is left is "not run" (not
    graded, no points lost), and no check is named as the cause of a check not run."""
    monkeypatch.setattr(B, "EXERCISE_CPU", 25.0)
    launches({"ring_peers", "rotate", "rotate_async", "ring_all_gather"})
    results = engine.run(["rotation"], impl="solutions", world_sizes=[2],
                         only=["ring_peers", "rotate", "rotate_async", "ring_all_gather"])
    status = verdicts(results)
    assert sorted(status.values()) == ["failed", "failed", "notrun", "notrun"], status
    notrun = [r for r in results if r.status == "notrun"]
    assert not any(f"rotation.{n.check}," in r.hint for r in results for n in notrun)
    assert all("ring_peers" in r.message or "rotate" in r.message for r in notrun), notrun


def test_the_shared_budgets_message_names_the_checks_that_spent_it():
    budgets = B.Budgets()
    check = type("C", (), {"id": "rotation.ring_reduce_scatter", "exercise": "rotation", "cpu_budget": 20})
    budgets.charge(check, 40.0)
    said = budgets.why("exercise", "rotation")
    assert "ring_reduce_scatter (40 CPU-s)" in said and "too slow" not in said


def test_a_hint_blames_only_a_check_that_failed():
    """A check not run (or busy) is never named as the cause of another's failure."""
    rs = [Result("rotation", "rotate", 2, "notrun", "not run: ...", task="E4.2"),
          Result("rotation", "ring_all_gather", 2, "failed", "max abs error", hint="h", task="E4.3")]
    diagnosis.blame_earlier_tasks(rs)
    assert rs[1].hint == "h"


def test_grading_fails_what_is_still_not_run_only_where_its_own_task_hung_or_spun():
    """Budgets are CPU time: what a task's own checks spent in every round is its doing,
    never a provisional full mark; a check of a task that never hung or spun (ring_peers,
    beside a rotate that deadlocks) stays not graded, never failed by association."""
    from rtp_course.instructor import grade_outcome
    rs = [Result("rotation", "rotate", 3, "notrun", "not run: ...", task="E4.2"),
          Result("rotation", "rotate_async", 2, "deadlock", "deadlock: ...", task="E4.2",
                 details={"stacks": {}}),
          Result("rotation", "ring_peers", 3, "notrun", "not run: ...", task="E4.1"),
          Result("rotation", "wait_twice", 2, "passed", task="E4.2")]
    assert grade_outcome.not_graded_ids(rs) == ["rotation.rotate", "rotation.ring_peers"]
    assert grade_outcome.stopped_ids(rs) == ["E4.2"]
    grade_outcome.fail_not_run(rs)
    assert [r.status for r in rs] == ["failed", "deadlock", "notrun", "passed"]
    assert "checks of its own task (E4.2) hung, spun or waited" in rs[0].message
    assert grade_outcome.not_graded_ids(rs) == ["rotation.ring_peers"]


def test_grading_fails_what_is_still_not_run_where_its_own_task_waited_without_computing():
    """A function that sleeps a little under the stall between its calls passes each check
    slowly and spends its exercise's hang budget (group._mark_waiting puts "waited" in the
    details): its task's checks still not run after the last round fail, and it runs last."""
    from rtp_course.instructor import grade_outcome
    rs = [Result("comm", "AllGather", 2, "passed", task="E2.3", details={"waited": 11.2}),
          Result("comm", "AllGather_float32", 3, "notrun", "not run: ...", task="E2.3"),
          Result("comm", "ReduceScatter", 3, "notrun", "not run: ...", task="E2.4")]
    assert rs[0].spent_budgets and not rs[0].never_returned
    assert grade_outcome.stopped_ids(rs) == ["E2.3"]
    grade_outcome.fail_not_run(rs)
    assert [r.status for r in rs] == ["passed", "failed", "notrun"]
    assert "hung, spun or waited without computing" in rs[1].message


def test_checks_of_a_task_that_spun_run_after_the_others(launches):
    """`later`: grading's next round runs the honest checks first."""
    fake = launches()
    engine.run(["rotation"], impl="solutions", world_sizes=[2, 3], later=("E4.1",),
               only=["ring_peers", "rotate", "ring_all_gather"])
    assert fake.runs == [(2, ["rotate", "ring_all_gather"]), (3, ["rotate", "ring_all_gather"]),
                         (2, ["ring_peers"]), (3, ["ring_peers"])]


def test_checks_that_hang_last_leave_every_world_size_to_the_others(launches, monkeypatch):
    """Every rotation hangs (blocking sends): a grading round that ran them last at each world
    size still spent the exercise's budget at 2 ranks, and ring_peers was never run at 3."""
    monkeypatch.setattr(B, "EXERCISE_CPU", 45.0)      # two spinning checks of 20 CPU-s, and a bit
    spins = {"rotate", "rotate_async", "rotate_uneven", "wait_twice"}
    launches(spins)
    results = engine.run(["rotation"], impl="solutions", world_sizes=[2, 3], again=False,
                         later=("E4.2",), only=["ring_peers", *spins])
    assert [r.status for r in results if r.check == "ring_peers"] == ["passed", "passed"]


def test_a_check_that_failed_in_another_tasks_function_is_not_named_as_the_cause():
    """`subgroup` (E4.2) failed in its ring_reduce_scatter phase (E4.4): it says nothing of
    ring_all_gather's (E4.3) own failure."""
    rs = [Result("rotation", "subgroup", 3, "failed", "max abs error", task="E4.2",
                 phase="subgroup ring_reduce_scatter"),
          Result("rotation", "ring_all_gather", 2, "failed", "max abs error", hint="h",
                 task="E4.3", phase="ring_all_gather dim=1")]
    diagnosis.blame_earlier_tasks(rs)
    assert rs[1].hint == "h"
    rs[0].phase = "subgroup clockwise"            # failed in its own rotate: it may explain
    diagnosis.blame_earlier_tasks(rs)
    assert "may follow from [E4.2] rotation.subgroup" in rs[1].hint


def test_a_check_names_the_check_of_its_own_task_whose_function_it_runs():
    """Issue 47: attention_layer (E8.4) runs ring_attention_backward (E8.4): where that check
    fails too, the layer's hint names it first (Check.follows); where it passes, not."""
    from rtp_course.checker.public.context_parallel import AttentionLayerTraining, RingAttentionBackward

    def results(backward):
        return [Result("context_parallel", "ring_attention_backward", 2, backward, "grad k",
                       hint="b", task="E8.4"),
                Result("context_parallel", "attention_layer", 2, "failed", "grad input",
                       hint="layer", task="E8.4")]
    checks = {c.id: c for c in (AttentionLayerTraining(), RingAttentionBackward())}
    rs = results("failed")
    diagnosis.blame_earlier_tasks(rs, checks)
    assert rs[1].hint.startswith("this may follow from [E8.4] "
                                 "context_parallel.ring_attention_backward"), rs[1].hint
    assert rs[0].hint == "b"
    rs = results("passed")
    diagnosis.blame_earlier_tasks(rs, checks)
    assert rs[1].hint == "layer"
