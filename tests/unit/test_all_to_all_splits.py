"""all_to_all_single's split sizes are refused with their numbers, where torch only says
"Split sizes doesn't match total dim 0 size"; its input must be contiguous as its output
(ProcessGroupNCCL::alltoall_base checks both). What torch accepts passes untouched."""
import pytest
import torch

from rtp_course.runtime.nccl import calls


@pytest.fixture(autouse=True)
def four_ranks(monkeypatch):
    monkeypatch.setattr(calls.dist, "get_world_size", lambda group=None: 4)


def before(*args, **kwargs):
    return calls.before("all_to_all_single", 0, "output", args, kwargs, "experts.py:9 in f")


def test_splits_that_fit_pass():
    out, x = torch.empty(6, 2), torch.zeros(5, 2)
    before(out, x, [1, 2, 0, 3], [2, 0, 3, 0], group=object())
    before(torch.empty(4, 2), torch.zeros(8, 2))                 # equal splits: 8 rows / 4


def test_splits_that_do_not_add_up_are_said_with_their_numbers():
    with pytest.raises(RuntimeError) as e:
        before(torch.empty(6, 2), torch.zeros(5, 2), [1, 2, 0, 3], [2, 0, 2, 0], group=object())
    msg = str(e.value)
    assert "input_split_sizes [2, 0, 2, 0]" in msg and "input's 5 rows" in msg, msg
    assert "adding up to 4" in msg and "experts.py:9" in msg, msg


def test_equal_splits_on_the_world_name_the_missing_group():
    with pytest.raises(RuntimeError, match=r"input's 2 rows equally over the world's 4 ranks "
                                           r"\(no group= given\)"):
        before(torch.empty(2, 3, dtype=torch.int64), torch.zeros(2, 3, dtype=torch.int64))


def test_a_non_contiguous_input_is_refused_as_the_output_is():
    with pytest.raises(calls.NCCLRuleError, match="rule 'Contiguity'"):
        before(torch.empty(4, 3), torch.zeros(3, 4).t())
