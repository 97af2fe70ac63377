"""Every correct way to write an exercise passes every check (tests/correct/<exercise>/*.py).

A checker may enforce only what a stub's "Rules" section states: another collective API,
a flat buffer, async handles or another valid order must not cost a point. Each entry runs
every public and hidden check of the tasks its edits touch (`wrongs.tasks_touched`: the
functions it changes and every task that calls them), at world sizes 1 to 4: at 2 confined,
as grading runs them (the default tier), at 1, 3 and 4 as a student's `check` runs them (the
extended tier, which CI runs too)."""
import pytest

from rtp_course.checker import engine, report
from wrongs import ROOT, build, impl_with, missing_in_torch, spec, tasks_touched

CORRECT = sorted(p for p in (ROOT / "tests" / "correct").glob("*/*.py") if not p.name.startswith("_"))


def _passes(path, tmp_path, sizes, confine):
    if missing_in_torch(path):
        pytest.skip(f"this torch has no {', '.join(missing_in_torch(path))}")
    impl, only = impl_with(path, tmp_path / "impl"), tasks_touched(path)
    results = engine.run([path.parent.name], impl=str(impl), world_sizes=sizes, hidden=True,
                         only=only, confine=confine)
    assert results and all(r.passed for r in results), (
        f"a correct alternative is rejected{' when confined' if confine else ''} "
        f"({spec(path)['bug']}):\n" + report.text(results))
    # correct code computes: waiting that would spend the hang budget (budgets.WAITED) is
    # a sleeper's mark, never a correct alternative's
    waited = {f"{r.check} at {r.world_size}": r.details["waited"] for r in results
              if "waited" in r.details}
    assert not waited, f"a correct alternative waited without computing: {waited}"


@pytest.mark.parametrize("path", CORRECT, ids=[f"{p.parent.name}/{p.stem}" for p in CORRECT])
def test_correct_alternative_passes_every_check_as_graded(path, tmp_path):
    """At world size 2, confined: as grading runs it."""
    _passes(path, tmp_path, [2], True)


@pytest.mark.extended
@pytest.mark.parametrize("path", CORRECT, ids=[f"{p.parent.name}/{p.stem}" for p in CORRECT])
def test_correct_alternative_passes_every_check_at_every_world_size(path, tmp_path):
    """At 1, 3 and 4 ranks (where bugs of ring indices and uneven splits show), unconfined
    (confinement acts on each rank alike)."""
    _passes(path, tmp_path, [1, 3, 4], False)


def test_every_entry_changes_the_reference():
    for path in CORRECT:
        assert build(path) != (ROOT / "solutions" / f"{path.parent.name}.py").read_text(), path


def test_every_exercise_has_at_least_three_alternatives():
    from rtp_course.course import EXERCISES
    counts = {ex: sum(p.parent.name == ex for p in CORRECT) for ex in EXERCISES}
    assert all(n >= 3 for n in counts.values()), counts


def test_an_entry_runs_the_checks_of_what_it_changes_and_of_its_callers():
    """tasks_touched: a change of rotate_async reaches every task that rotates; a helper no
    task covers, or no change at all, runs everything."""
    entry = ROOT / "tests" / "correct" / "rotation" / "receive_listed_first.py"
    from rtp_course import course
    touched = tasks_touched(entry)
    callers = {t.id for t in course.BY_MODULE["rotation"].tasks if "E4.2" in course.requirements(t.id)}
    assert "E4.2" in touched and callers <= set(touched), touched
    assert tasks_touched(ROOT / "tests" / "correct" / "tensor_parallel" / "chunked_shards.py") is None
