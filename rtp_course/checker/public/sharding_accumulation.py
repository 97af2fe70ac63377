"""The FSDP check of gradient accumulation (E7.2): the configuration real training uses
when a batch does not fit, micro-batches whose gradients add up before one optimizer step.
sharding.py registers it; it lives here to keep each module one job."""
from __future__ import annotations

import torch
from torch import nn

from rtp_course.checker.common import owned_module, seeded
from rtp_course.checker.public import sharding_harness as h
from rtp_course.checker.registry import Bound, Check, CommRule

GRADS = "backward/gradient shard of every unit, after both backward passes"
PASSES = {"": (1, 2), " again": (3,)}   # phase suffix: its backward's micro-batches (steps)


class AccumulatedFSDP(Check):
    """FullyShardedDataParallel with gradients accumulated as in serial PyTorch: a first
    backward after two forwards (two micro-batches), a second backward without zero_grad
    after one more forward. Every shard's .grad must be the sum of both passes' DDP gradients,
    each unit's gradient reduce-scattered once per backward however many forwards fed it."""
    exercise, task = "sharding", "E7.2"
    owned = ("build",)
    seed, data_seed = 27, 2700
    in_features, out_features = 7, 5
    hints = dict(h.FSDP_HINTS, **{
        GRADS: "rule 'Accumulation': two backward passes without zero_grad leave each shard's "
               ".grad the SUM of both passes' gradient shards (add the reduce-scattered shard "
               "to shard.grad, never assign it), and two forwards before one backward give the "
               "gradient of both: reduce-scatter a unit once its full gradient is complete (the "
               "post-accumulate-grad hook on `full` fires once per backward), never once per "
               "forward call",
        "error/backward": h.FSDP_HINTS["error/backward"] + "; after two forwards, every "
                          "call's views of a unit point into the same storage (one `full` per "
                          "unit for the module's life, never a new one per call)"})

    def build(self):
        return nn.Sequential(nn.Linear(7, 13), nn.Tanh(), nn.Linear(13, 5))

    def run(self, ctx):
        model = owned_module(self, "build", self.seed, ctx.rank).to(device=ctx.device,
                                                                     dtype=ctx.dtype)
        with ctx.phase("init"):
            fsdp = ctx.impl.sharding.FullyShardedDataParallel(model, group=ctx.group)
        for again, steps in PASSES.items():
            with ctx.phase(f"forward{again}"):
                loss = sum(h.loss_of(self, fsdp(x), y) for x, y in (
                    (ctx.to(t) for t in h.own_batch(self, s, ctx.rank)) for s in steps))
            with ctx.phase(f"backward{again}"):
                loss.backward()
            del loss
        ctx.record(GRADS, h.grads_of(fsdp.parameters()))

    def expected(self, world_size):
        members = list(range(world_size))
        model = seeded(self.build, self.seed, owner=0)    # group rank 0's weights win
        for steps in PASSES.values():     # the mean over ranks of each rank's loss: serial DDP
            sum(h.loss_of(self, model(x), y) for x, y in (
                h.own_batch(self, s, q) for s in steps for q in members)).backward(
                torch.tensor(1.0 / world_size, dtype=torch.float64))
        grads = {n: p.grad for n, p in model.named_parameters()}
        units = h.unit_names(model)
        return {g: h.cast({GRADS: h.fsdp_shard(grads, units, g, world_size)}, self.dtype)
                for g in members}

    def comm_rules(self, world_size):
        if world_size == 1:
            return []
        units = len(h.unit_names(self.build()))
        rules = [CommRule("init", "collective", Bound(1, 4), "the constructor broadcasts each "
                          "parameter and buffer from group rank 0, once")]
        for again, steps in PASSES.items():
            rules += [
                CommRule(f"forward{again}", "all_gather", Bound(1, len(steps) * units),
                         h.GATHER_ONCE + " (each forward call gathers each unit)"),
                CommRule(f"backward{again}", "all_reduce", 0, h.NO_ALL_REDUCE),
                CommRule(f"backward{again}", "reduce_scatter", Bound(1, units),
                         "rule 'Communication': backward reduce-scatters each unit's full "
                         "gradient once, however many forwards fed it (the post-accumulate-grad "
                         "hook fires once per backward; a module's backward hook fires once per "
                         "call)")]
        return rules
