"""Hidden checks for E4 `rotation` (instructor edition only): float32, bfloat16 and float16,
non-contiguous inputs, two rotations in flight at once, and other subgroups (pairs, crossed
pairs)."""
from __future__ import annotations

import torch

from rtp_course.checker.public import rotation as pub
from rtp_course.checker.registry import Check


class _Float32:
    hidden = True
    dtype = "float32"

    def expected(self, world_size):
        dtype = getattr(torch, self.dtype)
        exp = super().expected(world_size)
        return {r: {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point()
                    else v for k, v in e.items()} for r, e in exp.items()}


class RotateBFloat16(_Float32, pub.Rotate):
    """Half precision: a receive buffer made in the default float32 shows as another dtype."""
    name, dtype = "rotate_bfloat16", "bfloat16"


class RingReduceScatterFloat16(_Float32, pub.RingReduceScatter):
    name, dtype = "ring_reduce_scatter_float16", "float16"
    tolerance = {torch.float16: (1e-2, 2e-2)}   # partial sums in ring order, not serial's


class RotateFloat32(_Float32, pub.Rotate):
    name = "rotate_float32"


class RingAllGatherFloat32(_Float32, pub.RingAllGather):
    name = "ring_all_gather_float32"


class RingReduceScatterFloat32(_Float32, pub.RingReduceScatter):
    name = "ring_reduce_scatter_float32"


def _transposed(ctx):
    """ctx.to that hands out non-contiguous views (a transpose of a contiguous copy)."""
    orig = ctx.to

    def to(t):
        t = orig(t)
        return t.T.contiguous().T if t.dim() == 2 else t
    return to


class RingAllGatherNonContiguous(pub.RingAllGather):
    name, hidden = "ring_all_gather_noncontiguous", True

    def run(self, ctx):
        ctx.to = _transposed(ctx)
        super().run(ctx)


class TwoInFlight(Check):
    """Two rotations posted before either is waited on (as RTP's backward does with weights and
    accumulators), waited in reverse order; then one each way at once."""
    exercise, name, hidden = "rotation", "two_in_flight", True
    task = "E4.2"
    cpu_budget = 20.0
    hints = {"": "a handle must own its buffers and works: two rotations in flight at once must "
                 "not share a receive buffer or wait on each other's works"}

    def run(self, ctx):
        rot, r = ctx.impl.rotation, ctx.rank
        with ctx.phase("same direction"):
            first = rot.rotate_async(ctx.to(pub.value(r)), "counterclockwise", group=ctx.group)
            second = rot.rotate_async(ctx.to(pub.value(r) + 0.5), "counterclockwise",
                                      group=ctx.group)
            ctx.record("same direction/second", second.wait())
            ctx.record("same direction/first", first.wait())
        with ctx.phase("both directions"):
            cw = rot.rotate_async(ctx.to(pub.value(r)), "clockwise", group=ctx.group)
            ccw = rot.rotate_async(ctx.to(pub.value(r) + 0.5), "counterclockwise", group=ctx.group)
            ctx.record("both directions/counterclockwise", ccw.wait())
            ctx.record("both directions/clockwise", cw.wait())

    def expected(self, world_size):
        exp = {}
        for r in range(world_size):
            prev, nxt = (r - 1) % world_size, (r + 1) % world_size
            exp[r] = {"same direction/second": pub.value(nxt) + 0.5,
                      "same direction/first": pub.value(nxt),
                      "both directions/counterclockwise": pub.value(nxt) + 0.5,
                      "both directions/clockwise": pub.value(prev)}
        return exp

    def comm_rules(self, world_size):
        return (pub.p2p_rules("same direction", world_size, 2, pub.ONE_ROTATION)
                + pub.p2p_rules("both directions", world_size, 2, pub.ONE_ROTATION))


class SubgroupPairs(pub.Subgroup):
    """Two rings of two at once: {0, 1} and {2, 3}."""
    name, hidden, world_sizes = "subgroup_pairs", True, (4,)

    def members(self, world_size):
        return [[0, 1], [2, 3]]


class SubgroupCrossed(pub.Subgroup):
    """Two rings of two ranks that are not neighbours, {0, 3} and {1, 2}, at once."""
    name, hidden, world_sizes = "subgroup_crossed", True, (4,)

    def members(self, world_size):
        return [[0, 3], [1, 2]]
