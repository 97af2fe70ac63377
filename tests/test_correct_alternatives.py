"""Every correct way to write an exercise passes every check (tests/correct/<exercise>/*.py).

A checker may enforce only what a stub's "Rules" section states: another collective API,
a flat buffer, async handles or another valid order must not cost a point. Each entry runs
every public and hidden check of the tasks its edits touch (`wrongs.tasks_touched`: the
functions it changes and every task that calls them), at world sizes 1 to 4: at 2 confined,
as grading runs them, at 1, 3 and 4 as a student's `check` runs them."""
import pytest

from rtp_course.checker import engine, report
from wrongs import ROOT, build, impl_with, missing_in_torch, spec, tasks_touched

CORRECT = sorted(p for p in (ROOT / "tests" / "correct").glob("*/*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("path", CORRECT, ids=[f"{p.parent.name}/{p.stem}" for p in CORRECT])
def test_correct_alternative_passes_every_check(path, tmp_path):
    if missing_in_torch(path):
        pytest.skip(f"this torch has no {', '.join(missing_in_torch(path))}")
    impl, only = impl_with(path, tmp_path / "impl"), tasks_touched(path)
    # Each world size once; confined as grading runs them at one (confinement acts on each rank
    # alike, and costs about 0.7 s a launch)
    for sizes, confine in (([1, 3, 4], False), ([2], True)):
        results = engine.run([path.parent.name], impl=str(impl), world_sizes=sizes, hidden=True,
                             only=only, confine=confine)
        assert results and all(r.passed for r in results), (
            f"a correct alternative is rejected{' when confined' if confine else ''} "
            f"({spec(path)['bug']}):\n" + report.text(results))


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
