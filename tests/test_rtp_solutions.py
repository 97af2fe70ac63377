"""The parts of the E4/E5 checks that are not themselves checks: the documented shard layout the
parent judges against, and the overlap detector. (The solutions and the wrong implementations
are run by the checker: `rtp-course check rotation flyweight --impl solutions --hidden` and
tests/test_wrong_implementations.py.)"""
from torch import nn

from rtp_course.checker.public.flyweight import overlapped
from rtp_course.checker.public.flyweight_layout import shard_slices, sharded_layers, unit_span
from rtp_course.models import build_model


def test_layout_is_the_one_the_stub_documents():
    # the examples of rtp_course/flyweight.py's docstrings
    assert shard_slices(nn.Linear(5, 10), 1, 3) == {"weight": (0, ((4, 7),)), "bias": (0, ((4, 7),))}
    attn = shard_slices(nn.MultiheadAttention(6, 3), 2, 3)
    assert attn["in_proj_weight"] == (0, ((4, 6), (10, 12), (16, 18)))
    assert attn["out_proj.weight"] == (1, ((4, 6),)) and attn["out_proj.bias"] == (0, ())
    assert [unit_span(nn.Linear(3, 10), s, 4) for s in range(4)] == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert shard_slices(nn.Embedding(9, 7), 0, 2) == {"weight": (1, ((0, 4),))}
    assert shard_slices(nn.Conv2d(2, 5, 3, bias=False), 2, 3) == {"weight": (0, ((4, 5),))}


def test_wrapped_layers_do_not_look_inside_attention():
    layers = sharded_layers(build_model("lm", tiny=True))
    assert "layers.0.self_attn" in layers and "layers.0.self_attn.out_proj" not in layers
    assert list(layers)[0] == "embedding" and list(layers)[-1] == "decoder"
    assert sharded_layers(nn.Linear(2, 3)) == {"": ["weight", "bias"]}


def test_overlap_needs_compute_between_a_receive_and_its_wait():
    posted = [("isend", 0), ("irecv", 1)]
    assert overlapped(posted + [("compute", "linear"), ("wait", 0), ("wait", 1)])
    assert not overlapped(posted + [("wait", 0), ("wait", 1), ("compute", "linear")])
    assert not overlapped([("recv", 0), ("compute", "linear")])   # a blocking receive
    assert overlapped([("compute", "linear")])                     # one rank: nothing to overlap
