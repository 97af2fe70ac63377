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
