"""Hidden checks for E2 `comm` (instructor edition only): float32, non-contiguous inputs, 2-D
shapes, a size the world size does not divide."""
from __future__ import annotations

import torch

from rtp_course.checker.common import randn
from rtp_course.checker.public import comm as pub
from rtp_course.checker.public.tensor_parallel_harness import raises
from rtp_course.checker.registry import Check


class _Float32:
    hidden = True
    dtype = "float32"

    def expected(self, world_size):
        exp = super().expected(world_size)
        return {r: {k: v.float() if isinstance(v, torch.Tensor) else v for k, v in e.items()}
                for r, e in exp.items()}


class DuplicationFloat32(_Float32, pub.DuplicationCheck):
    name = "Duplication_float32"


class AllReduceFloat32(_Float32, pub.AllReduceCheck):
    name = "AllReduce_float32"


class AllGatherFloat32(_Float32, pub.AllGatherCheck):
    name = "AllGather_float32"


class SplitFloat32(_Float32, pub.SplitCheck):
    name = "Split_float32"


class _Transposed:
    """The input arrives as a non-contiguous view (a transpose), as activations often do."""
    hidden = True

    def input(self, rank, world_size, dim):
        return super().input(rank, world_size, dim)

    def run(self, ctx):
        orig = ctx.to

        def to_noncontiguous(t):
            t = orig(t)
            if t.dim() == 3 and t.shape[0] == t.shape[2]:
                t = t.transpose(0, 2).contiguous().transpose(0, 2)
            return t
        ctx.to = to_noncontiguous
        super().run(ctx)


class AllGatherNonContiguous(_Transposed, pub.AllGatherCheck):
    name = "AllGather_noncontiguous"


class SplitNonContiguous(_Transposed, pub.SplitCheck):
    name = "Split_noncontiguous"


class DuplicationNonContiguous(_Transposed, pub.DuplicationCheck):
    name = "Duplication_noncontiguous"


class _RefusesUnevenSize(Check):
    """A size the world size does not divide: the docstring's ValueError, not a silent
    truncation (narrow(dim, r*S//N, S//N) drops the last S % N entries) or a hang."""
    hidden, world_sizes = True, (2, 3, 4)
    call = ""

    def run(self, ctx):
        x = ctx.to(randn(71, 3, 2 * ctx.world_size + 1))
        with ctx.phase("forward"):
            kind, _ = raises(lambda: self.apply(ctx, x))
        ctx.record_value(f"forward/{self.call} of a size N does not divide raises", kind)

    def expected(self, world_size):
        return {r: {f"forward/{self.call} of a size N does not divide raises": "ValueError"}
                for r in range(world_size)}


class SplitUnevenSize(_RefusesUnevenSize):
    exercise, name, call = "comm", "Split_uneven_size", "Split"
    hints = {"forward": "Split: S must be divisible by N; otherwise raise ValueError naming the "
                        "sizes (the docstring), instead of dropping the last S % N entries"}

    def apply(self, ctx, x):
        return ctx.impl.comm.Split.apply(x, -1, ctx.group)
