"""What the data_parallel checks share besides their training loop: the models, the groups
of ranks that are not consecutive, and the rule of a training step."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from rtp_course.checker.common import mlp
from rtp_course.checker.registry import Bound, CommRule

OPTIMIZERS = ("sgd", "adam")
N_PARAMS = 4        # mlp(): two Linear layers
ONCE_PER_STEP = ("rule 'Communication': a training step all-reduces each gradient at most once "
                 "(one all-reduce per parameter, or fewer with a flat buffer); hooks are "
                 "registered once, in the constructor, not on every forward")


class ShiftedMLP(nn.Module):
    """The check's MLP with its input shifted by a buffer drawn at construction: a buffer, not
    a parameter, so only a constructor that broadcasts buffers too makes the ranks agree."""

    def __init__(self):
        super().__init__()
        self.net = mlp()
        self.register_buffer("shift", torch.randn(8))

    def forward(self, x):
        return self.net(x + self.shift)


class _FrozenAndSpare(nn.Module):
    """The check's MLP with its first layer frozen, and a `spare` layer forward never uses."""

    def __init__(self):
        super().__init__()
        self.net = mlp()
        self.net[0].requires_grad_(False)
        self.spare = nn.Linear(6, 6)

    def forward(self, x):
        return self.net(x)


PAIRS = ([0, 2], [1, 3])    # two groups of ranks that are not consecutive


def pair_of(rank: int) -> list:
    return PAIRS[rank % 2]


def step_rules(steps: int = 3) -> list:
    """At most one all-reduce per parameter in each training step (steps that a check does not
    run see no call, which the bound allows)."""
    return [CommRule(f"step{k} {opt}", "collective", Bound(high=N_PARAMS), ONCE_PER_STEP)
            for k in range(1, steps + 1) for opt in OPTIMIZERS]


def inner(model):
    return getattr(model, "module", model)


def group_rank(ctx, group):
    return dist.get_rank(group), dist.get_world_size(group)
