"""A check's hint is its longest hints key found in the failing key; a key written
`<part>#scaled` answers only a tensor that is a multiple of the expected one."""
import torch

from rtp_course.checker import verdict
from rtp_course.checker.registry import Check


class Sharded(Check):
    hints = {"gradient shard": "LAYOUT: rank r holds elements [r*S, (r+1)*S)",
             "backward/gradient shard": "BACKWARD: reduce-scatter full.grad",
             "gradient shard#scaled": "SCALED: divide the sum by the group's size"}


def _hint_for(key, expected, actual):
    ok, _, details = verdict.compare_tensor(expected, actual, world_size=2)
    assert not ok
    return verdict._hint(Sharded(), key, details)


def test_the_longest_key_found_wins_and_forms_are_left_out():
    check = Sharded()
    assert check.hint("step1 sgd/gradient shard").startswith("LAYOUT")
    assert check.hint("backward/gradient shard of every unit").startswith("BACKWARD")
    assert check.hint("backward/gradient shard of every unit", form="scaled").startswith("SCALED")
    assert check.hint("forward/output", form="scaled") == ""


def test_a_multiple_of_the_expected_tensor_gets_the_scaled_hint_others_the_checks():
    expected = torch.linspace(-1, 1, 12, dtype=torch.float64)
    assert _hint_for("step1 sgd/gradient shard", expected, 2 * expected).startswith("SCALED")
    misplaced = expected.roll(3)
    assert _hint_for("step1 sgd/gradient shard", expected, misplaced).startswith("LAYOUT")
