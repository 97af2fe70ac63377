"""A wrong tensor is described by what it looks like it came from, and the hint follows the cause."""
import torch

from rtp_course.checker.verdict import compare_tensor

X = torch.linspace(-1.0, 2.0, 24, dtype=torch.float64).reshape(4, 6)


def cause(actual, world_size=2):
    ok, msg, details = compare_tensor(X, actual, world_size)
    assert not ok
    return msg, details.get("cause", ""), details.get("cause_hint", ""), details.get("cause_overrides")


def test_float32_precision_is_named_as_the_cause():
    """The issue's example: 'expected -2.31041, got -2.31041' says nothing; the dtype does."""
    g = torch.randn(8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    in_float32 = (g.float() * 3.3 + g.float() * 1.7) / 5      # a float32 buffer on the way
    for actual in (in_float32, in_float32.double()):
        ok, msg, details = compare_tensor(g, actual, 2)
        assert not ok and "float32" in details["cause"], msg
        assert "dtype" in details["cause_hint"] and details["cause_overrides"], details


def test_nan_and_uninitialised_memory():
    y = X.clone()
    y[1, 2] = float("nan")
    assert "NaN" in cause(y)[1]
    y = X.clone()
    y[0, 0] = 4.6e18
    assert "huge" in cause(y)[1] and "torch.empty" in cause(y)[2]


def test_zeros_ratios_sign_and_order():
    assert cause(torch.zeros_like(X))[1] == "it is all zeros"
    assert "a sum over the ranks where their mean is wanted" in cause(2 * X)[1]
    assert "divided by the world size once too often" in cause(X / 4, world_size=4)[1]
    assert "sign is flipped" in cause(-X)[1]
    assert "wrong places" in cause(X.flip(0))[1]
    msg, why, hint, overrides = cause(X + 0.5)               # nothing recognisable
    assert why == "" and "max abs error" in msg


def test_a_plain_value_error_keeps_the_checks_own_hint():
    assert not cause(X.flip(0))[3] and not cause(torch.zeros_like(X))[3]


# ---------------------------------------------------------------- exceptions: hint by cause
from rtp_course.checker.diagnosis import exception_hint  # noqa: E402
from rtp_course.checker.registry import Check  # noqa: E402
from rtp_course.checker.types import Outcome, RankStatus  # noqa: E402
from rtp_course.checker.verdict import compare  # noqa: E402

RAISED = {  # what torch and gloo say -> a word the hint must contain
    "RuntimeError: mat1 and mat2 shapes cannot be multiplied (6x4 and 8x3)": "shard's shape",
    "RuntimeError: The size of tensor a (4) must match the size of tensor b (8) at "
    "non-singleton dimension 1": "shard's shape",
    "RuntimeError: Sizes of tensors must match except in dimension 1. Expected size 3 but got "
    "size 2 for tensor number 1 in the list.": "split dimension",
    "RuntimeError: one of the variables needed for gradient computation has been modified by "
    "an inplace operation: [torch.DoubleTensor [4, 6]] is at version 1": "clone",
    "RuntimeError: a leaf Variable that requires grad is being used in an in-place "
    "operation.": "torch.no_grad()",
    "RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn":
        "autograd history",
    "RuntimeError: expected scalar type Double but found Float": "dtype",
    "IndexError: list index out of range": "(r + k) % N",
    "terminate called after throwing an instance of 'gloo::EnforceNotMet' what(): [enforce "
    "fail at pair.cc:456] op.preamble.length <= op.nbytes. 288 vs 144. Received data size "
    "doesn't match expected size.": "shape of the shard that arrives",
}


def test_each_exception_gets_the_hint_of_its_cause():
    for text, word in RAISED.items():
        hint = exception_hint(text, "sure") or exception_hint(text, "likely")
        assert word in hint, text
    assert exception_hint("ValueError: something else entirely", "likely") == ""


class _Check(Check):
    exercise, name = "comm", "AllGather"
    hints = {"error": "the check's own hint for any exception"}


class _Plain(Check):
    exercise, name = "comm", "AllGather"


def test_sure_causes_win_over_the_checks_own_hint_likely_ones_only_fill_in():
    raised = {"status": "error", "type": "RuntimeError", "phase": "forward", "where": "",
              "message": "one of the variables needed for gradient computation has been "
                         "modified by an inplace operation"}
    shapes = dict(raised, message="mat1 and mat2 shapes cannot be multiplied (6x4 and 8x3)")
    left = dict(raised, message="[pair.cc:553] Connection closed by peer [127.0.0.1]:1234")
    other = dict(raised, message="something the table does not know")
    raised, shapes, left, other = map(Outcome.parse, (raised, shapes, left, other))
    assert "clone" in compare(_Check(), 2, {0: raised}, {}, []).hint
    assert compare(_Check(), 2, {0: shapes}, {}, []).hint == "the check's own hint for any exception"
    assert "shard's shape" in compare(_Plain(), 2, {0: shapes}, {}, []).hint
    assert compare(_Check(), 2, {0: left, 1: raised}, {}, []).rank == 1   # the first cause speaks
    assert "same collective calls" in compare(_Check(), 2, {0: left}, {}, []).hint
    assert compare(_Check(), 2, {0: other}, {}, []).hint == "the check's own hint for any exception"


def test_ranks_waiting_in_new_group_get_the_checks_own_hint_not_a_missing_group():
    """A rank that finished while others wait in a collective usually means a collective without
    group=; ranks waiting in dist.new_group (collective over the whole job) made the calls in
    another order: the check's own hint says so, not the missing-group one."""
    from rtp_course.checker.diagnosis import hang_hint
    done = {"check": "groups.build_groups", "phase": "done"}
    waiting = lambda call: {"check": "groups.build_groups", "phase": "build_groups",  # noqa: E731
                            "call": call, "family": None}
    statuses = {0: waiting("dist.new_group([0, 1]), call 1 of build_groups"), 1: done,
                2: waiting("dist.new_group([1, 3]), call 4 of build_groups")}
    parsed = lambda: {r: RankStatus.parse(st) for r, st in statuses.items()}  # noqa: E731
    assert hang_hint("groups.build_groups", parsed()) == ""
    statuses[2] = waiting("all_reduce")
    statuses[0] = waiting("all_reduce")
    assert "finished this check" in hang_hint("groups.build_groups", parsed())


def test_a_ranks_own_exception_is_reported_before_a_peers_unreadable_result():
    """The launcher ends the other ranks once one raised; a rank ended in the middle of writing
    its result leaves a file cut short. The exception that started it is what to report."""
    error = {"status": "error", "type": "RuntimeError", "message": "the layer's shapes",
             "phase": "structure", "where": "tensor_parallel.py:3", "records": {}, "values": {}}
    cut = {"status": "error", "type": "MalformedResult", "phase": "", "where": "",
           "message": "rank 1's result file is not a result the checker can judge (OSError)",
           "records": {}, "values": {}}
    ok = {"status": "ok", "records": {}, "values": {}}
    ok, cut, error = map(Outcome.parse, (ok, cut, error))
    result = compare(_Plain(), 3, {0: ok, 1: cut, 2: error}, {}, [])
    assert result.rank == 2 and "RuntimeError" in result.message, result
    alone = compare(_Plain(), 3, {0: ok, 1: cut, 2: ok}, {}, [])
    assert alone.rank == 1 and "MalformedResult" in alone.message, alone
