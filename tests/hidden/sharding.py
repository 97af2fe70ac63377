"""Hidden checks for E7 `sharding` (instructor edition only): other dtypes (float32, float16),
weight decay (a frozen parameter stays as it is),
shapes and the transformer LM."""
from __future__ import annotations

import torch
from torch import nn

from rtp_course.checker.common import randint
from rtp_course.checker.public import sharding as pub
from rtp_course.checker.public import sharding_harness as h
from rtp_course.models import build_model, lm_loss


class ShardedOptimizerFloat32(pub.ShardedOptimizerCheck):
    """float32, three steps of each optimizer, and a bias of 2 elements: on 3 or 4 ranks some
    shards hold only padding. Adam's eps 1e-4, as in FSDP's float32 check: three correct
    alternatives were once 5e-5 off serial with 1e-8 (float32 rounding of a near-zero
    gradient, which the order of a sum decides, made a step of up to lr)."""
    name, hidden = "ShardedOptimizer_float32", True
    dtype = "float32"
    adam_eps = 1e-4
    seed, data_seed, steps = 41, 4100, 3
    in_features, out_features = 6, 2

    def build(self):
        return nn.Sequential(nn.Linear(6, 9), nn.Tanh(), nn.Linear(9, 2))


class FullyShardedDataParallelFloat32(pub.FSDPCheck):
    """The FSDP check in float32, other weights and data. Adam's eps 1e-4: a smaller one turns
    float32 rounding of a near-zero gradient (which the order of a sum decides) into a step of
    up to lr (correct ranks differed from serial by 8e-5 with 1e-8, by 1.9e-5 with 1e-6)."""
    name, hidden = "FullyShardedDataParallel_float32", True
    dtype = "float32"
    adam_eps = 1e-4
    seed, data_seed = 51, 5100


class FullyShardedDataParallelFloat16(pub.FSDPCheck):
    """The FSDP check in float16 (rule 'Dtypes': a buffer, a shard or a gathered unit made in
    the default float32 fails), two SGD steps; rounding of float16's size, a bug of O(1)."""
    name, hidden = "FullyShardedDataParallel_float16", True
    dtype, opt_steps = "float16", (("sgd", 2),)
    tolerance = {torch.float16: (2e-2, 2e-2)}
    seed, data_seed = 71, 7100


class FullyShardedDataParallelLM(pub.FSDPCheck):
    """The tiny transformer LM: an embedding, two decoder layers (each one unit: attention,
    MLP and LayerNorms together, inside an nn.ModuleList) and the vocabulary decoder; a
    buffer (the positional table) that stays as it is; token inputs (no input gradient)."""
    name, hidden = "FullyShardedDataParallel_lm", True
    opt_steps = (("sgd", 1), ("adam", 1))
    seed, data_seed = 61, 6100
    cpu_budget = 80.0

    def build(self):
        return build_model("lm", tiny=True)

    def batch(self, step, owner):
        return (randint(self.data_seed + 10 * step, 96, 2, 6, owner=owner),
                randint(self.data_seed + 10 * step + 1, 96, 2, 6, owner=owner))

    def loss(self, out, target):
        return lm_loss(out, target)
