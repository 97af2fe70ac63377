"""Hidden checks for E1 `data_parallel` (instructor edition only)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rtp_course.checker.common import mlp, named_grads, seeded
from rtp_course.checker.public import data_parallel as pub
from rtp_course.checker.registry import Bound, Check, CommRule


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


class AverageGradientsSubgroups(Check):
    """Two independent data-parallel pairs, ranks {0,1} and {2,3}, each with its own data:
    average_gradients must average over `group` only."""
    exercise, name, hidden = "data_parallel", "average_gradients_subgroups", True
    tolerance = pub.TIGHT
    world_sizes = (4,)
    hints = {"backward/grad": "average over the ranks of `group` only: all_reduce(p.grad, "
                              "group=group), then divide by dist.get_world_size(group)",
             "step": "each pair trains its own model: every collective and the world size "
                     "must use `group`"}

    def run(self, ctx):
        group = [ctx.new_group([0, 1]), ctx.new_group([2, 3])][ctx.rank // 2]
        pair = ctx.rank // 2
        model = seeded(mlp, 0).to(ctx.device)
        x, y = (ctx.to(t) for t in pub.own_batch(0, ctx.rank, 2, 50 * pair))
        F.mse_loss(model(x), y).backward()
        with ctx.phase("backward"):
            ctx.impl.data_parallel.average_gradients(model, group=group)
        for n, g in named_grads(model).items():
            ctx.record(f"backward/grad {n}", g)

    def expected(self, world_size):
        exp = {}
        for r in range(world_size):
            pair = r // 2
            serial = pub.serial_run(0, (2 * pair, 2 * pair + 1), data_seed=50 * pair)
            exp[r] = {k: v for k, v in pub.expected_for(serial, r % 2, 2, with_init=False).items()
                      if k.startswith("backward/")}
        return exp

    def comm_rules(self, world_size):
        return [CommRule("backward", "collective", Bound(1, pub.N_PARAMS),
                         "rule 'Communication': one all-reduce per parameter over `group` "
                         "(or fewer, flattened)")]
