"""The rules table (rtp_course/course/rules.py) holds both ways, and each of its cells is proved.

* every rule a rejection quotes (rule 'Name') is a rule of the exercise whose checks quote it;
* every stub names the course-wide rules that apply to it, and states its own rules, no more;
* every cell (a rule in an exercise) is held by public checks, and a wrong implementation
  that breaks that rule there (tests/wrong/<exercise>/*.py marked `RULE: Name`) fails one of
  them: those entries run here, with the holding checks only, not in
  test_wrong_implementations.py.
"""
import re

import pytest

from rtp_course.course import EXERCISES
from rtp_course.course.rules import ALL, RULES, applying_to, pointer
from wrongs import ROOT, caught, collect, impl_with, reports, spec

QUOTED = re.compile(r"rule '([A-Z][A-Za-z -]*)'")
BULLET = re.compile(r"^\* (.+)$", re.M)
CELLS = [(name, ex) for name, rule in RULES.items() for ex in rule.held_by]


def rules_section(exercise: str) -> str:
    doc = (ROOT / "rtp_course" / f"{exercise}.py").read_text().split('"""', 2)[1]
    assert "Rules" in doc, f"rtp_course/{exercise}.py: its docstring has no Rules section"
    return doc[doc.index("Rules"):]


def public_checks(exercise: str) -> set:
    from rtp_course.checker.registry import check_modules, load_checks
    return {c.name for c in load_checks(check_modules([exercise], False))}


def quoted_by(exercise: str) -> set:
    files = list((ROOT / "rtp_course" / "checker" / "public").glob(f"{exercise}*.py"))
    files += list((ROOT / "tests" / "hidden").glob(f"{exercise}.py"))
    return {m for f in files for m in QUOTED.findall(f.read_text())}


@pytest.mark.parametrize("exercise", EXERCISES)
def test_every_quoted_rule_is_a_rule_of_its_exercise(exercise):
    mine = {r.name for r in applying_to(exercise)}
    assert not quoted_by(exercise) - mine, (
        f"checks of {exercise} quote rules that do not apply to it (rtp_course/course/rules.py): "
        f"{sorted(quoted_by(exercise) - mine)}")


def test_rules_quoted_by_the_shared_checker_code_are_course_wide_or_named_by_a_check():
    """The runtime and the verdict quote rules for every exercise: 'Device', 'Contiguity',
    'Dtypes', 'Send buffers'; 'Group' and 'Communication' only through a check's own rule."""
    shared = [ROOT / "rtp_course" / "runtime" / "gpu_placement.py",
              *(ROOT / "rtp_course" / "runtime" / "nccl").glob("*.py"),
              *(ROOT / "rtp_course" / "checker").glob("*.py")]
    names = {m for f in shared for m in QUOTED.findall(f.read_text())}
    course_wide = {n for n, r in RULES.items() if r.course_wide}
    assert names - course_wide <= {"Group", "Communication"}, names - course_wide


@pytest.mark.parametrize("exercise", EXERCISES)
def test_each_stub_names_its_course_wide_rules_and_states_its_own(exercise):
    section = rules_section(exercise)
    assert pointer(exercise) in " ".join(section.split()), (
        f"rtp_course/{exercise}.py: its Rules section must start with {pointer(exercise)!r}")
    own = {r.name for r in applying_to(exercise, course_wide=False)}
    bullets = BULLET.findall(section)
    unknown = [b for b in bullets if not any(b.startswith(n) for n in own)]
    assert not unknown, f"rtp_course/{exercise}.py states rules the table does not hold: {unknown}"
    unstated = [n for n in own if not any(b.startswith(n) for b in bullets)]
    assert not unstated, f"rtp_course/{exercise}.py does not state its rules {unstated}"


def test_notebook_01_shows_the_course_wide_rules_from_the_table():
    source = (ROOT / "scripts" / "notebook_src" / "01_launching_and_collectives.py").read_text()
    assert "rules.markdown()" in source


@pytest.mark.parametrize("rule,exercise", CELLS, ids=[f"{r}-{e}" for r, e in CELLS])
def test_each_cell_is_held_by_public_checks_and_has_a_wrong_entry(rule, exercise):
    held = RULES[rule].held_by[exercise]
    if held != ALL:
        assert held and set(held) <= public_checks(exercise), (
            f"rule {rule!r} in {exercise}: {sorted(set(held) - public_checks(exercise))} are "
            f"not public checks")
    entries = [p.stem for p in collect(exercise) if rule in spec(p)["rules"]]
    assert entries, f"no wrong entry in tests/wrong/{exercise}/ breaks rule {rule!r} (RULE: {rule})"


ENTRIES = collect(rules=True)


@pytest.mark.parametrize("path", ENTRIES, ids=[f"{p.parent.name}/{p.stem}" for p in ENTRIES])
def test_a_wrong_entry_breaking_a_rule_fails_a_check_holding_it(path, tmp_path):
    from rtp_course.checker import engine
    s, exercise = spec(path), path.parent.name
    unknown = [r for r in s["rules"] if r not in RULES or exercise not in RULES[r].held_by]
    assert not unknown, f"{path}: RULE names {unknown}, not rules of {exercise}"
    holding = set()
    for r in s["rules"]:
        held = RULES[r].held_by[exercise]
        holding |= public_checks(exercise) if held == ALL else set(held)
    only = sorted(holding & set(s["only"])) if s["only"] else sorted(holding)
    assert only, f"{path}: ONLY names none of the checks holding {s['rules']}"
    impl = impl_with(path, tmp_path / "impl")
    results, text = caught(path, lambda sizes: engine.run(
        [exercise], impl=str(impl), world_sizes=sizes, timeout_scale=0.5, only=only),
        holds=lambda results: {r.check for r in results if not r.passed} & holding)
    failing = {r.check for r in results if not r.passed}
    assert failing & holding, f"not caught by the checks holding {s['rules']}: {s['bug']}\n{text}"
    why = reports(path, text)
    assert not why, why
    assert "Traceback" not in text and "Warning" not in text, text
