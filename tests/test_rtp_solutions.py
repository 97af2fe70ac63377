"""The parts of the E4/E5 checks that are not themselves checks: the documented shard layout the
parent judges against, and the overlap detector. (The solutions and the wrong implementations
are run by the checker: `rtp-course check rotation flyweight --impl solutions --hidden` and
tests/test_wrong_implementations.py.)"""
import pytest
import torch
from torch import nn

from rtp_course.checker.public.flyweight_harness import is_work, overlapped, some_overlap
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


def test_overlap_needs_the_steps_work_not_any_op():
    # rule 'Overlap': a token op between posting and waiting hides nothing (the step's work,
    # a product, a convolution or a lookup, comes after the wait)
    posted = [("isend", 0), ("irecv", 1)]
    token = [("compute", "aten.add_.tensor")]
    assert not overlapped(posted + token + [("wait", 0), ("wait", 1), ("compute", "aten.mm.default")])
    assert not some_overlap(posted + token + [("wait", 1), ("compute", "aten.addmm.default")])
    for op in ("aten.mm.default", "aten.addmm.default", "aten.bmm.default", "aten.convolution.default",
               "aten.embedding.default", "aten.index.tensor", "aten.embedding_dense_backward.default",
               "aten._scaled_dot_product_flash_attention_for_cpu.default", "linear"):
        assert is_work(("compute", op)), op
        assert overlapped(posted + [("compute", op), ("wait", 0), ("wait", 1)]), op
    for op in ("aten.add_.tensor", "aten.exp.default", "aten.sum.default", "aten.index_fill_.int_scalar",
               "aten.native_layer_norm.default", "aten.mul.tensor"):
        assert not is_work(("compute", op)), op


# ------------------------------------------------------------------ the reference's prefetch
class _Flipping(nn.Module):
    """Two Linears called in the other order on odd steps: the layer order the reference
    learns in its first forward (to start each layer's first transfer early) is wrong half
    of the time, and a third layer runs only on some steps."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(6, 6), nn.Linear(6, 6), nn.Linear(6, 5)
        self.step = 0

    def forward(self, x):
        first, second = (self.a, self.b) if self.step % 2 == 0 else (self.b, self.a)
        y = second(torch.tanh(first(x)))
        return self.c(y) if self.step % 3 != 2 else y[..., :5]


def _flipping_against_ddp(rank, world):
    import copy

    from rtp_course.course.impl import exercise, load_impl
    load_impl("solutions")
    flyweight = exercise("flyweight")
    torch.manual_seed(0)
    serial = _Flipping()
    rtp = flyweight.RotatedTensorParallel(copy.deepcopy(serial))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (serial, rtp)]
    worst = 0.0
    for step in range(6):
        batches = [torch.randn(4, 6, generator=torch.Generator().manual_seed(10 * step + r))
                   for r in range(world)]
        for opt in opts:
            opt.zero_grad()
        serial.step = rtp.module.step = step
        out = rtp(batches[rank])
        out.square().mean().backward()
        # DDP semantics: the serial model's gradient of the mean of the ranks' losses
        serial_out = [serial(b) for b in batches]
        sum(o.square().mean() for o in serial_out).div(world).backward()
        worst = max(worst, (out - serial_out[rank]).abs().max().item())
        for opt in opts:
            opt.step()
    full = rtp.full_state_dict()
    worst = max([worst] + [(full[k] - v).abs().max().item() for k, v in serial.state_dict().items()])
    return {"worst": worst}


@pytest.mark.parametrize("world", [2, 3])
def test_reference_prefetch_stays_right_when_the_layer_order_changes(world):
    from rtp_course.runtime.launcher import launch
    for result in launch(_flipping_against_ddp, world, timeout=120):
        assert result["worst"] < 1e-5, result
