"""Every correct way to write an exercise passes every check (tests/correct/<exercise>/*.py).

A checker may enforce only what a stub's "Rules" section states: another collective API,
a flat buffer, async handles or another valid order must not cost a point."""
import pytest

from rtp_course.checker import engine, report
from wrongs import ROOT, build, impl_with, missing_in_torch, spec

CORRECT = sorted(p for p in (ROOT / "tests" / "correct").glob("*/*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("path", CORRECT, ids=[f"{p.parent.name}/{p.stem}" for p in CORRECT])
def test_correct_alternative_passes_every_check(path, tmp_path):
    if missing_in_torch(path):
        pytest.skip(f"this torch has no {', '.join(missing_in_torch(path))}")
    impl = impl_with(path, tmp_path / "impl")
    results = engine.run([path.parent.name], impl=str(impl), world_sizes=[1, 2, 3, 4], hidden=True)
    assert results and all(r.passed for r in results), (
        f"a correct alternative is rejected ({spec(path)['bug']}):\n" + report.text(results))


def test_every_entry_changes_the_reference():
    for path in CORRECT:
        assert build(path) != (ROOT / "solutions" / f"{path.parent.name}.py").read_text(), path


def test_every_exercise_has_at_least_three_alternatives():
    from rtp_course.course import EXERCISES
    counts = {ex: sum(p.parent.name == ex for p in CORRECT) for ex in EXERCISES}
    assert all(n >= 3 for n in counts.values()), counts
