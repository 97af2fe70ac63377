"""Hidden checks for E1 `data_parallel` (instructor edition only)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rtp_course.checker.common import named_grads
from rtp_course.checker.public import data_parallel as pub
from rtp_course.checker.registry import Check


class WithUnusedParameter(nn.Module):
    """A model whose `unused` layer gets no gradient: .grad stays None and must be skipped."""

    def __init__(self):
        super().__init__()
        self.used = nn.Linear(8, 6)
        self.unused = nn.Linear(8, 6)

    def forward(self, x):
        return self.used(x)


def build(seed):
    torch.manual_seed(seed)
    return WithUnusedParameter().double()


class AverageGradientsUnusedParam(Check):
    exercise, name, hidden = "data_parallel", "average_gradients_unused_param", True
    tolerance = pub.TIGHT
    hints = {"": "parameters whose .grad is None (not used in this step) must be skipped"}

    def run(self, ctx):
        model = build(3).to(ctx.device)
        x, y = (ctx.to(t) for t in pub.own_batch(0, ctx.rank, ctx.world_size))
        F.mse_loss(model(x), y).backward()
        with ctx.phase("backward"):
            ctx.impl.data_parallel.average_gradients(model, group=ctx.group)
        for n, g in named_grads(model).items():
            if g is not None:
                ctx.record(f"backward/grad {n}", g)
        ctx.record_value("backward/unused grad is None", model.unused.weight.grad is None)

    def expected(self, world_size):
        model = build(3)
        x, y = pub.batch(0, range(world_size))
        F.mse_loss(model(x), y).backward()
        exp = {f"backward/grad {n}": g for n, g in named_grads(model).items() if g is not None}
        exp["backward/unused grad is None"] = True
        return {r: dict(exp) for r in range(world_size)}


class DataParallelThreeSteps(pub.DataParallelWrapper):
    """Three steps with a different seed: hooks must keep working step after step."""
    name, hidden = "DataParallel_three_steps", True
    seed_offset = 77
    data_seed = 5

    def run(self, ctx):
        old = pub.STEPS
        pub.STEPS = 3
        try:
            super().run(ctx)
        finally:
            pub.STEPS = old

    def expected(self, world_size):
        old = pub.STEPS
        pub.STEPS = 3
        try:
            return super().expected(world_size)
        finally:
            pub.STEPS = old

    def data_seed_of(self, ctx):
        return self.data_seed
