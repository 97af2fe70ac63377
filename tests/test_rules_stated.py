"""A checker may enforce only what a stub's "Rules" section states: every rule a rejection
quotes (rule 'Name') is named in the Rules of the exercise whose checks quote it."""
import re

import pytest

from rtp_course.runtime import gpu_placement
from rtp_course.course import EXERCISES
from wrongs import ROOT

QUOTED = re.compile(r"rule '([^']+)'")


def rules_section(exercise: str) -> str:
    text = (ROOT / "rtp_course" / f"{exercise}.py").read_text()
    doc = text.split('"""', 2)[1]
    assert "Rules" in doc, f"rtp_course/{exercise}.py: its docstring has no Rules section"
    return doc[doc.index("Rules"):]


def quoted_by(exercise: str) -> set:
    files = list((ROOT / "rtp_course" / "checker" / "public").glob(f"{exercise}*.py"))
    files += list((ROOT / "tests" / "hidden").glob(f"{exercise}.py"))
    names = {m for f in files for m in QUOTED.findall(f.read_text())}
    return names | set(QUOTED.findall(gpu_placement.RULE))   # every check runs under 'Device'


@pytest.mark.parametrize("exercise", EXERCISES)
def test_every_quoted_rule_is_stated_in_the_stub(exercise):
    rules = rules_section(exercise).lower()
    missing = [name for name in sorted(quoted_by(exercise)) if name.lower() not in rules]
    assert not missing, f"rtp_course/{exercise}.py states no rule named {missing}"


def test_the_device_rule_is_quoted():
    assert QUOTED.findall(gpu_placement.RULE) == ["Device"]
