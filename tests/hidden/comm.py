"""Hidden checks for E2 `comm` (instructor edition only): float32, float16 and bfloat16,
non-contiguous inputs."""
from __future__ import annotations

import torch

from rtp_course.checker.public import comm as pub


class _Float32:
    hidden = True
    dtype = "float32"

    def expected(self, world_size):
        dtype = getattr(torch, self.dtype)
        exp = super().expected(world_size)
        return {r: {k: v.to(dtype) if isinstance(v, torch.Tensor) else v for k, v in e.items()}
                for r, e in exp.items()}


# Sums of N values of size ~2 in another order than serial's: each addition rounds by up to
# half a unit in the last place at the partial sum's size (float16: 0.004 at 4; bfloat16:
# 0.03), which the default absolute tolerance is too tight for. A bug is off by O(1).
HALF = {torch.float16: (1e-2, 2e-2), torch.bfloat16: (2e-2, 1.5e-1)}


class _Float16(_Float32):
    dtype, tolerance = "float16", HALF


class _BFloat16(_Float32):
    dtype, tolerance = "bfloat16", HALF


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


class AllReduceFloat16(_Float16, pub.AllReduceCheck):
    """Half precision: a helper tensor or buffer in the default float32 shows as another dtype."""
    name = "AllReduce_float16"


class AllGatherBFloat16(_BFloat16, pub.AllGatherCheck):
    name = "AllGather_bfloat16"


class DuplicationBFloat16(_BFloat16, pub.DuplicationCheck):
    name = "Duplication_bfloat16"
