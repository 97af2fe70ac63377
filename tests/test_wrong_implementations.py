"""Every realistic wrong implementation is caught, with a message that points at the bug."""

import pytest

from rtp_course.checker import engine
from wrongs import CLASSES, caught, collect, impl_with, reports, spec

CASES = collect()
RUN_HERE = collect(rules=False)     # those proving a rule's cell run in test_rules_stated.py


@pytest.mark.parametrize("path", RUN_HERE, ids=[f"{p.parent.name}/{p.stem}" for p in RUN_HERE])
def test_wrong_implementation_is_caught(path, tmp_path):
    s = spec(path)
    impl = impl_with(path, tmp_path / "impl")
    results, text = caught(path, lambda sizes: engine.run(
        [path.parent.name], impl=str(impl), world_sizes=sizes, timeout_scale=0.5,
        only=s["only"], hidden=s["hidden"]))
    assert not all(r.passed for r in results), f"not caught: {s['bug']}\n{text}"
    why = reports(path, text)
    assert not why, why
    assert "Traceback" not in text and "Warning" not in text, text


def test_collection_covers_every_exercise_with_enough_bugs():
    from rtp_course.course import EXERCISES
    counts = {ex: sum(p.parent.name == ex for p in CASES) for ex in EXERCISES}
    assert all(n >= 6 for n in counts.values()), counts


def test_every_exercise_has_a_bug_of_each_class_its_contract_allows():
    from rtp_course.course import EXERCISES
    tagged = {p: spec(p)["classes"] for p in CASES}
    untagged_or_unknown = [f"{p.parent.name}/{p.stem}: {c}" for p, c in tagged.items()
                           if not c or set(c) - set(CLASSES)]
    assert not untagged_or_unknown, "give each entry a CLASS: line of known classes"
    missing = [f"{ex}: {cls} ({what})" for cls, (what, where) in CLASSES.items()
               for ex in (EXERCISES if where == "*" else where.split())
               if not any(p.parent.name == ex and cls in c for p, c in tagged.items())]
    assert not missing, "bug classes without an entry:\n" + "\n".join(missing)


def test_every_message_an_entry_expects_exists():
    """A SAYS id names a message of the course's (rtp_course/course/messages.py) or a hint
    of a check of the entry's exercise: a typo would otherwise fail only when the bug runs."""
    from rtp_course.checker.registry import check_modules, hidden_dir, load_checks
    from rtp_course.course.messages import MESSAGES
    unknown = []
    for path in CASES:
        checks = load_checks(check_modules([path.parent.name], hidden=hidden_dir() is not None))
        known = set(MESSAGES) | {f"{c.id}:{key}" for c in checks for key in c.hints}
        unknown += [f"{path.parent.name}/{path.stem}: {i}" for i in spec(path)["says"]
                    if i not in known]
    assert unknown == []
