"""Which hint an exception gets, as a table: the first source in verdict's order that has one
wins (the rank's own, the error's kind, a sure cause, the check's for this exception, the
check's for the phase, a likely cause)."""
import pytest

from rtp_course.checker import verdict
from rtp_course.checker.registry import Check
from rtp_course.checker.types import Outcome


class Plain(Check):
    exercise, name = "comm", "AllReduce"
    hints = {}


class Hinted(Check):
    exercise, name = "comm", "AllReduce"
    hints = {"error/forward": "CHECK'S FOR THE EXCEPTION", "forward": "CHECK'S FOR THE PHASE"}


class PhaseOnly(Check):
    exercise, name = "comm", "AllReduce"
    hints = {"forward": "CHECK'S FOR THE PHASE"}


def _o(message, **more):
    return Outcome.parse({"status": "error", "type": "RuntimeError", "message": message,
                          "phase": "forward", **more})


SURE = "Received data size doesn't match expected size"   # a cause the exception makes sure of
CASES = [
    ("the rank's own", Hinted(), _o(SURE, hint="RANK'S OWN")),
    ("a sure cause", Hinted(), _o(SURE)),
    ("the check's, for this exception", Hinted(), _o("something odd")),
    ("the check's, for the phase", PhaseOnly(), _o("something odd")),
    ("", Plain(), _o("something odd")),
]


def test_the_order_is_the_documented_one():
    assert [name for name, _ in verdict._exception_hints()] == [
        "the rank's own", "the error's kind", "a sure cause", "the check's, for this exception",
        "the check's, for the phase", "a likely cause"]


@pytest.mark.parametrize("source, check, o", CASES, ids=[c[0] or "none" for c in CASES])
def test_the_first_source_with_a_hint_wins(source, check, o):
    said = f"rank 0 raised {o.type}: {o.message}"
    got, hint = verdict.error_hint(check, o, said)
    assert got == source, (got, hint)
    assert bool(hint) == bool(source)
