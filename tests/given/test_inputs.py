"""checker.inputs and checker.provider: who can draw whose data."""
import pytest
import torch

from rtp_course.checker import channel, inputs
from rtp_course.checker.common import randn
from rtp_course.checker.provider import MAX_ELEMENTS, MAX_SERVED, Provider


@pytest.fixture
def fresh_parent(monkeypatch):
    """A parent process with a master key of its own, restored afterwards."""
    monkeypatch.setattr(inputs, "_master", None)
    monkeypatch.setattr(inputs, "_rank", None)
    monkeypatch.setattr(inputs, "_ask", None)
    monkeypatch.setattr(channel, "_LINK", None)


class _Check:
    id, owned = "comm.AllReduce", ()


def test_a_rank_gets_over_its_channel_what_the_parent_draws_for_it_and_nothing_else(
        fresh_parent):
    """A rank holds no key: its own data comes as values from the parent's channel server
    (checker/channel.py), which serves a rank only the data of sets it belongs to."""
    from launch_targets import draw_own_inputs
    from rtp_course.runtime.launcher import launch
    server = channel.Server(2, Provider(2, [_Check()], urgent=None)).start()
    try:
        got = launch(draw_own_inputs, 2, args=(_Check.id,), channels=server, timeout=60)
    finally:
        server.stop()
    with inputs.scope(_Check.id):
        for r in range(2):
            assert torch.equal(got[r]["mine"], randn(5, 3, owner=r))
            assert torch.equal(got[r]["pair"], randn(6, 3, owner=(0, 1)))  # a set, any order
            assert torch.equal(got[r]["shared"], randn(5, 3))
            assert "only they and the checker hold" in got[r]["other"]
            assert got[r]["key"] != "drawn" and "holds no key" in got[r]["seed"]


def test_the_parent_refuses_a_rank_the_data_of_another(fresh_parent):
    """What a rank asks is the rank's word: the parent checks whose channel asks."""
    provider = Provider(4, [_Check()], urgent=None)
    with pytest.raises(ValueError, match="a rank gets only its own"):
        provider.serve(1, {"what": "randn", "seed": 5, "shape": [2], "owner": [2],
                           "dtype": "float64"}, 0)
    with pytest.raises(ValueError, match="in the check a rank is in|inputs are served"):
        provider.serve(1, {"what": "randn", "seed": 5, "shape": [2], "owner": [1],
                           "dtype": "float64"}, 7)


def test_a_rank_over_its_quota_is_refused_before_anything_is_drawn(fresh_parent, monkeypatch):
    """A rank that asks again and again after its quota costs the parent no draw: the
    request is charged before the tensor is made, and a refused one is not charged."""
    from rtp_course.checker import common
    provider = Provider(2, [_Check()], urgent=None)
    biggest = {"what": "randn", "seed": 1, "shape": [MAX_ELEMENTS], "owner": [0],
               "dtype": "float32"}
    fits = MAX_SERVED // (MAX_ELEMENTS * 4)
    for _ in range(fits):
        provider.serve(0, biggest, 0)
    drawn = []
    monkeypatch.setattr(common, "randn", lambda *a, **k: drawn.append(a))
    monkeypatch.setattr(common, "randint", lambda *a, **k: drawn.append(a))
    for request in (biggest, {**biggest, "what": "randint", "high": 9},
                    {**biggest, "dtype": "float64"}):
        with pytest.raises(ValueError, match="asked for more than 256 MB of inputs"):
            provider.serve(0, request, 0)
    assert drawn == [], "a refused request was drawn first"
    assert provider.served[0] == fits * MAX_ELEMENTS * 4
    provider.serve(1, {**biggest, "owner": [1]}, 0)     # another rank's quota is its own


def test_every_run_draws_other_data(fresh_parent, monkeypatch):
    first = randn(5, 3, owner=0)
    monkeypatch.setattr(inputs, "_master", None)      # the next run's parent
    assert not torch.equal(first, randn(5, 3, owner=0))
    assert torch.equal(randn(5, 3), randn(5, 3))      # shared data stays put


def test_forget_zeroes_the_master_in_place(fresh_parent):
    key = inputs._master_key()
    inputs.forget()
    assert key == bytearray(32) and inputs._master is None


def test_a_ranks_data_differs_from_check_to_check(fresh_parent):
    """What a rank is given in one check is no use in another: the same seed and owner draw
    other values in each check (checker.inputs.scope)."""
    with inputs.scope("comm.AllReduce"):
        first, again = randn(5, 3, owner=1), randn(5, 3, owner=1)
    with inputs.scope("comm.AllGather"):
        other = randn(5, 3, owner=1)
    assert torch.equal(first, again) and not torch.equal(first, other)
    with inputs.scope("comm.AllReduce"):
        assert torch.equal(randn(5, 3), randn(5, 3))     # shared data is every check's
