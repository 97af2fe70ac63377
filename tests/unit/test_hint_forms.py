"""A check's hint is its longest hints key found in the failing key; a key written
`<part>#scaled` answers only a tensor that is a multiple of the expected one."""
import torch

from rtp_course.checker import verdict
from rtp_course.checker.registry import Check
from rtp_course.checker.types import Outcome


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


class Raising(Check):
    hints = {"error/step1": "STEP: the catch-all", "error": "ANY",
             "error#none": "NONE: a frozen parameter's .grad", "error#size": "SIZE: S = ceil"}


def _error_hint(type_, message, phase="step1"):
    return verdict._check_error_hint(Raising(), Outcome.parse(
        {"status": "error", "type": type_, "message": message, "phase": phase}))


def test_an_exceptions_words_pick_the_hint_of_its_kind_else_the_phases():
    assert _error_hint("AttributeError", "'NoneType' object has no attribute 'reshape'") \
        .startswith("NONE")
    assert _error_hint("RuntimeError", "shape '[41, 5]' is invalid for input of size 204") \
        .startswith("SIZE")
    assert _error_hint("RuntimeError", "Check failed: outputShape[0] * worldSize == "
                                       "inputShape[0] (0 vs. 206)").startswith("SIZE")
    assert _error_hint("RuntimeError", "cannot register a hook on a tensor that doesn't "
                                       "require gradient").startswith("STEP")   # no #hook
    assert _error_hint("ValueError", "something else").startswith("STEP")
    assert _error_hint("ValueError", "something else", phase="init") == "ANY"
