"""Hidden checks for E10 `experts` (instructor edition only): float32 and bfloat16, a batched
[B1, B2, S, d] input, other routing draws.

The expert-parallel layer is not run in half precision here: a bfloat16 router's top-k can
differ between a GPU rank and the parent's CPU on near ties, which would judge the hardware,
not the code. The all-to-all moves values exactly, so it is checked in bfloat16.
"""
from __future__ import annotations

import torch

from rtp_course.checker.public import experts as pub


class _Float32:
    hidden, dtype = True, "float32"

    def expected(self, world_size):
        dtype = getattr(torch, self.dtype)
        exp = super().expected(world_size)
        return {r: {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point()
                    else v for k, v in e.items()} for r, e in exp.items()}


class _BFloat16(_Float32):
    dtype = "bfloat16"


class AllToAllFloat32(_Float32, pub.AllToAllCheck):
    name = "AllToAll_float32"


class AllToAllBFloat16(_BFloat16, pub.AllToAllCheck):
    name = "AllToAll_bfloat16"


class ExpertParallelMoEFloat32(_Float32, pub.ExpertParallelMoECheck):
    name = "ExpertParallelMoE_float32"


class _Batched4D(pub._Case):
    seed, top_k, batched = 5, 2, (2, 2)


class _Redrawn(pub._Top2):
    seed, capacity_factor = 7, 1.0


class ExpertParallelMoEBatched4D(pub.ExpertParallelMoEBatched):
    """x [2, 2, T/4, d] (the public check's is [2, T/2, d]): every leading dim flattened."""
    name, hidden, case = "ExpertParallelMoE_batched_4d", True, _Batched4D()


class ExpertParallelMoERedrawn(pub.ExpertParallelMoECheck):
    """k = 2, capacity factor 1.0, another draw of the weights and tokens."""
    name, hidden, case = "ExpertParallelMoE_top2_redrawn", True, _Redrawn()


class TrainStepFloat32(_Float32, pub.TrainStepCheck):
    """SGD only: Adam divides each gradient by its own size, so float32 rounding of a
    near-zero gradient becomes a step of the learning rate, and a correct implementation
    summing in another order failed at 3 ranks on some draws."""
    name, optimizers = "train_step_float32", ("sgd",)


class TrainStepTop2(pub.TrainStepCheck):
    """Training with k = 2 and dropping (capacity factor 0.5, ranks of 16 and 14 tokens)."""
    name, hidden, case = "train_step_top2", True, pub._Top2()
