"""A tensor a rank could not record is reported with the check's word for why (a string value
under the same key: a key full_state_dict() did not return is "missing"), not as a None."""
import torch

from rtp_course.checker import verdict
from rtp_course.checker.registry import Check
from rtp_course.checker.types import Outcome


class StateDict(Check):
    exercise, name = "sharding", "StateDictWords"
    hints = {"full_state_dict": "HINT: the serial keys"}


def _judge(records, values):
    outcome = Outcome.parse({"status": "ok", "records": records, "values": values, "events": []})
    expected = {0: {"full_state_dict/a.fc.weight": torch.ones(2, dtype=torch.float64)}}
    return verdict._values(StateDict(), dict(exercise="sharding", check="StateDictWords",
                                             world_size=1), 1, {0: outcome}, expected)


def test_a_missing_key_is_said_missing_with_the_hint():
    r = _judge({}, {"full_state_dict/a.fc.weight": "is missing: no such key"})
    assert r.message == "rank 0, full_state_dict/a.fc.weight is missing: no such key"
    assert r.hint.startswith("HINT")


def test_without_a_word_the_message_stays_the_harness_own():
    assert _judge({}, {}).message == "full_state_dict/a.fc.weight: nothing was recorded"
    assert "is None" in _judge({"full_state_dict/a.fc.weight": None}, {}).message
