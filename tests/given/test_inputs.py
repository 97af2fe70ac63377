"""checker.inputs: who can draw whose data."""
import pytest
import torch

from rtp_course.checker import inputs
from rtp_course.checker.common import randn


@pytest.fixture
def fresh_parent(monkeypatch):
    """A parent process with a master key of its own, restored afterwards."""
    monkeypatch.setattr(inputs, "_master", None)
    monkeypatch.setattr(inputs, "_rank", None)
    monkeypatch.setattr(inputs, "_rank_keys", {})


def test_a_rank_draws_what_the_parent_draws_for_it_and_nothing_else(tmp_path, fresh_parent):
    mine, shared, pair = randn(5, 3, owner=2), randn(5, 3), randn(6, 3, owner=(2, 3))
    inputs.write_rank_keys(tmp_path, 4)
    inputs.enter_rank(2, tmp_path)
    assert torch.equal(randn(5, 3, owner=2), mine)
    assert torch.equal(randn(5, 3), shared)
    assert torch.equal(randn(6, 3, owner=(3, 2)), pair)        # a set, in any order
    for owner in (1, (0, 1), (0, 1, 3)):
        with pytest.raises(inputs.NotYourInput, match="only they and the checker hold"):
            randn(6, 3, owner=owner)
    with pytest.raises(inputs.NotYourInput):
        inputs.owner_key(2)                    # the master is not there to derive from


def test_key_files_hold_only_the_sets_of_their_rank_and_are_deleted(tmp_path, fresh_parent):
    inputs.write_rank_keys(tmp_path, 4)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"key.{r}" for r in range(4)]
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in tmp_path.iterdir())
    inputs.enter_rank(1, tmp_path)
    assert not (tmp_path / "key.1").exists() and (tmp_path / "key.0").exists()
    assert len(inputs._rank_keys) == 8 and all("1" in k.split(",") for k in inputs._rank_keys)


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
