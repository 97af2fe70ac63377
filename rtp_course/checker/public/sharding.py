"""Public checks for E7 `sharding`: ZeRO-1 and FSDP by hand, against serial training.

Every rank starts from weights of its own (group rank 0's must win) and feeds its OWN batch;
the parent trains the serial model on the concatenated batch (DDP semantics: the gradient is
the mean over ranks) and says what each rank must hold: the full parameters (ZeRO-1) or
outputs, input gradients and its shards (FSDP), each shard's gradient, and the weights after
SGD and Adam steps, at sizes the world size does not divide.

Structure is measured, not assumed: the shard layout (the stub's SHARDS rule); the
collectives of each phase, their count and bytes (no all-reduce; each unit gathered once per
pass); the overlap of FSDP's prefetch (commlog's trace with the compute of a dispatch mode:
in forward every unit's gather but the first is posted before some compute and waited after
it); memory: every tensor storage alive in the rank, less what it may hold (ZeRO-1: the
inner optimizer's state is the shards'; FSDP: shards, their gradients and optimizer state,
and after forward at most two gathered units besides the activations).
"""
from __future__ import annotations

import torch
from torch import nn

from rtp_course.checker.common import make_optimizer, owned_module
from rtp_course.checker.public import sharding_harness as h
from rtp_course.checker.public.sharding_accumulation import AccumulatedFSDP
from rtp_course.checker.registry import Bound, Check, CommRule, Like
from rtp_course.training import memory

ZERO_HELD = ("memory/bytes held besides the parameters, gradients and the inner optimizer's "
             "shards and state")


class ShardedOptimizerCheck(Check):
    """ZeRO-1 on an MLP whose parameters (205, 41, 369, 9 and 27, 3 elements) the world size
    does not divide, one of them frozen (the middle bias: requires_grad=False, no gradient):
    construction (the ranks' own weights, group rank 0's win), then `steps` SGD steps and
    `steps` Adam steps, each on a fresh model; at step QUIET_STEP the group's last rank's loss
    is zero, so are all its gradients (it reduce-scatters them all the same); after each step
    the shards' gradients, the shards and the full parameters; after Adam the optimizer state
    and every storage the rank keeps. The model is large enough (5 KB of float64 parameters)
    that the Memory rule's 1 KB of slack cannot hide a second flat buffer."""
    exercise, name = "sharding", "ShardedOptimizer"
    task = "E7.1"
    hints = h.ZERO_HINTS
    owned = ("build",)
    adam_eps = None               # None: torch.optim.Adam's default
    optimizers = h.ZERO_OPTIMIZERS    # {name: (class, kwargs)}, a fresh model each
    memory_sizes = h.MEMORY_SIZES     # world sizes where every storage alive is counted
    free_frozen_shard = False     # the shard's values at a frozen parameter are not judged
    seed, data_seed, steps = 3, 500, 2
    in_features, out_features = 5, 3

    def build(self):
        model = nn.Sequential(nn.Linear(5, 41), nn.Tanh(), nn.Linear(41, 9), nn.Tanh(),
                              nn.Linear(9, 3))
        model[2].bias.requires_grad_(False)          # frozen: no gradient, never stepped
        return model

    def groups(self, ctx):
        return ctx.group

    def run(self, ctx):
        group = self.groups(ctx)
        scan = ctx.world_size in self.memory_sizes
        before = memory.live_storages() if scan else None
        for i, (opt_name, (cls, kwargs)) in enumerate(h.zero_optimizers(self).items()):
            model = owned_module(self, "build", self.seed, ctx.rank).to(device=ctx.device,
                                                                         dtype=ctx.dtype)
            with ctx.phase(h.init_phase(i, opt_name)):
                opt = ctx.impl.sharding.ShardedOptimizer(model.parameters(), cls, group=group,
                                                         **kwargs)
            if i == 0:
                for n, p in model.named_parameters():
                    ctx.record(f"init/{n}", p)
            mine = h.members_of(self, ctx.world_size, ctx.rank)
            frozen = [not p.requires_grad for p in model.parameters()]
            for step in range(1, self.steps + 1):
                x, y = (ctx.to(t) for t in h.own_batch(self, step, ctx.rank))
                weight = h.loss_weight(step, mine, ctx.rank)
                # one phase: step() may wait for reduce-scatters that gradient hooks started
                with ctx.phase(f"step{step} {opt_name}"):
                    opt.zero_grad()
                    (h.loss_of(self, model(x), y) * weight).backward()
                    opt.step()
                shards = h.inner_parameters(opt)
                ctx.record(f"step{step} {opt_name}/gradient shard",
                           h.grads_of(shards, none_is_zero=True))
                ctx.record(f"step{step} {opt_name}/shard", h.shards_of(shards) if not
                           self.free_frozen_shard else h.frozen_zeroed(
                               h.shards_of(shards), model.parameters(), frozen, len(mine)))
                for (n, p), still in zip(model.named_parameters(), frozen):
                    ctx.record(f"step{step} {opt_name}/{n}{h.FROZEN * still}", p)
        inner = getattr(opt, "optimizer", None)
        state = getattr(inner, "state", {})
        shards = h.inner_parameters(opt)
        ctx.record_value("memory/optimizer state bytes", memory.optimizer_state_bytes(inner)
                         if isinstance(getattr(inner, "state", None), dict) else None)
        if scan:
            params = list(model.parameters())
            ctx.record_value(ZERO_HELD, h.held(before, params, [p.grad for p in params], shards,
                                               [s.grad for s in shards], state, ctx.records,
                                               ctx.values, roots=[model, opt]))

    def members(self, world_size):
        return [list(range(world_size))]

    def expected(self, world_size):
        exp = {}
        for members in self.members(world_size):
            serial = h.zero_serial(self, members)
            world = len(members)
            elsize = h.element_size(self)
            shard_elems = sum(h.pieces(t.numel(), world) for t in serial["init"].values())
            frozen = serial["frozen"]
            for g, rank in enumerate(members):
                e = {f"init/{n}": t for n, t in serial["init"].items()}
                e["memory/optimizer state bytes"] = Bound(
                    high=1.25 * 2 * shard_elems * elsize,
                    what=f"Adam's two moments of this rank's shard, {shard_elems} elements; a "
                         f"full optimizer would hold "
                         f"{2 * sum(t.numel() for t in serial['init'].values()) * elsize}")
                for opt_name in h.zero_optimizers(self):
                    run = serial[opt_name]
                    for k in range(self.steps):
                        phase = f"step{k + 1} {opt_name}"
                        after = run["params"][k]
                        e[f"{phase}/gradient shard"] = h.zero_expected(run["grads"][k], g, world,
                                                                       self.dtype)
                        e[f"{phase}/shard"] = h.zero_expected(
                            {n: t * (n not in frozen) for n, t in after.items()}
                            if self.free_frozen_shard else after, g, world, self.dtype)
                        e.update({f"{phase}/{n}{h.FROZEN * (n in frozen)}": t
                                  for n, t in after.items()})
                if world_size in self.memory_sizes:
                    flat = world * shard_elems * elsize
                    mine = shard_elems * elsize
                    e[ZERO_HELD] = Bound(high=flat + mine + 1024, what=(
                        f"at most one flat buffer of the padded parameters ({flat} bytes) and "
                        f"one of this rank's shards ({mine}): torch's gloo may hold the last "
                        f"collective's output and input a moment longer; a second flat buffer "
                        f"kept is over; a full optimizer's state would be "
                        f"{2 * sum(t.numel() for t in serial['init'].values()) * elsize}"))
                exp[rank] = h.cast(e, self.dtype)
        return exp

    def comm_rules(self, world_size):
        rules = {}
        for members in self.members(world_size):
            world = len(members)
            group = tuple(members) if world < world_size else None
            mine = [] if world == 1 else self._rules(members, group)
            rules.update({r: mine for r in members})
        return rules

    def _rules(self, members, group) -> list:
        serial, world = h.zero_serial(self, members), len(members)
        n = len(serial["init"])
        shard = sum(h.pieces(t.numel(), world) for t in serial["init"].values()) * \
            h.element_size(self)
        rules = []
        for init in (h.init_phase(i, o) for i, o in enumerate(h.zero_optimizers(self))):
            rules += [CommRule(init, "collective", Bound(1, n),
                               "the constructor broadcasts each parameter from group rank 0, "
                               "once (nothing else)", members=group),
                      CommRule(init, "p2p", 0, "the constructor broadcasts, nothing else")]
        for opt_name in h.zero_optimizers(self):
            for step in range(1, self.steps + 1):
                phase = f"step{step} {opt_name}"
                rules += [
                    CommRule(phase, "all_reduce", 0, h.NO_ALL_REDUCE),
                    CommRule(phase, "reduce_scatter", Bound(1, n),
                             "a training step reduce-scatters each parameter's gradient once "
                             "(in step(), or started by gradient hooks in backward and waited "
                             "in step(); or all of them in one flat buffer)",
                             nbytes=Bound(high=world * shard), members=group),
                    CommRule(phase, "all_gather", Bound(1, n),
                             "step() all-gathers each parameter's SHARD once (S elements from "
                             "every rank; or all shards in one flat buffer)",
                             nbytes=Bound(high=shard), members=group),
                    CommRule(phase, "collective", Bound(2, 2 * n),
                             "a training step reduce-scatters the gradients and all-gathers the "
                             "shards, nothing else"),
                    CommRule(phase, "p2p", 0, "ZeRO-1 uses collectives only")]
        return rules


# optimizers that move a parameter stepped with a zero gradient
DECAYING = {"sgd_wd": (torch.optim.SGD, dict(lr=0.05, momentum=0.9, weight_decay=0.1)),
            "adamw": (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1))}


class ShardedOptimizerWeightDecay(ShardedOptimizerCheck):
    """The public ZeRO-1 check's model (its middle bias frozen) trained with weight decay,
    which moves a parameter stepped with a zero gradient (SGD's wd * p, AdamW's decay) where
    momentum and Adam from zero state do not: the frozen parameter must stay as it is (rule
    'Frozen and unused': "it is never stepped"). Its shard's values are not judged (one flat
    shard may step it with gradient 0 if nothing goes back into the parameter); its gradient
    shard is, as in the public check. No storage counted (the public check does)."""
    name = "ShardedOptimizer_weight_decay"
    world_sizes = (2, 3)
    optimizers = DECAYING
    memory_sizes = ()
    free_frozen_shard = True
    seed, data_seed = 13, 1300
    hints = dict(ShardedOptimizerCheck.hints, **{
        f"error/step{i} {o}": h.ZERO_STEP_ERROR for i in (1, 2) for o in DECAYING})


class ShardedOptimizerSubgroups(ShardedOptimizerCheck):
    """Two independent ZeRO-1 groups, global ranks {0, 2} and {1, 3}, each with its own data:
    collectives on `group` only, its rank 0 (global 1 for {1, 3}) the source of the weights."""
    name, world_sizes = "ShardedOptimizer_subgroups", (4,)
    seed, data_seed = 31, 3100
    hints = dict(h.ZERO_HINTS, **{
        "init/": "rule 'Group': the initial weights come from the group's rank 0, global rank "
                 "dist.get_global_rank(group, 0) (rank 1 for the group {1, 3})",
        "error/init": h.GROUP_SRC,
        "error": "rule 'Group': the shard index and the number of shards are the GROUP rank and "
                 "size; every collective on `group`"})

    def members(self, world_size):
        return [list(m) for m in h.PAIRS]

    def groups(self, ctx):
        made = [(m, ctx.new_group(m)) for m in self.members(ctx.world_size)]
        return next(g for m, g in made if ctx.rank in m)


# ====================================================================== FSDP
FORWARD_HELD = "forward/bytes held after forward besides shards and activations"
GATHERED_AGAIN = "backward/bytes of this rank's shards all-gathered again"
FSDP_HELD = "memory/bytes held besides shards, gradients, optimizer state and buffers"


class Block(nn.Module):
    """A unit with submodules of its own and a buffer: its parameters are 'fc.weight',
    'fc.bias', 'norm.weight', 'norm.bias' inside it ('layers.0.fc.weight' in the model), and
    its `scale` buffer is drawn by each rank (group rank 0's must win)."""

    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)
        self.register_buffer("scale", torch.rand(width) + 0.5)

    def forward(self, x):
        return x + torch.tanh(self.fc(self.norm(x))) * self.scale


class Nested(nn.Module):
    """The shape of the transformer LM notebook 09 benchmarks: a first layer, an nn.ModuleList
    of blocks (each block one unit: 'layers.0', 'layers.1', ...), a last layer."""

    def __init__(self, width=22, blocks=3):
        super().__init__()
        self.inp = nn.Linear(7, width)
        self.layers = nn.ModuleList(Block(width) for _ in range(blocks))
        self.out = nn.Linear(width, 5)

    def forward(self, x):
        x = torch.tanh(self.inp(x))
        for layer in self.layers:
            x = layer(x)
        return self.out(x)


class FSDPCheck(Check):
    """FullyShardedDataParallel on a nested model (`Nested`: units of 176, 550, 550, 550 and
    115 elements, the world size does not divide some; three of them blocks inside an
    nn.ModuleList, with submodules and a buffer each rank draws itself), each rank its own
    weights and batch: the buffers and the shard after construction, full_state_dict (the
    serial keys, 'layers.0.fc.weight'), the output, the input gradient and the shards'
    gradients, the shards after two SGD then two Adam steps (at step QUIET_STEP the group's
    last rank's loss is zero, and so are its gradients), full_state_dict again. Each phase's
    collectives; the first step's overlap (commlog's trace); memory after forward, after
    backward and after the steps (every storage alive in the rank)."""
    exercise, name = "sharding", "FullyShardedDataParallel"
    task = "E7.2"
    hints = h.FSDP_HINTS
    owned = ("build",)
    seed, data_seed = 7, 700
    in_features, out_features = 7, 5
    opt_steps = (("sgd", 2), ("adam", 2))
    slack = 2048                       # bytes a correct rank may hold besides the rule's
    memory_sizes = h.MEMORY_SIZES      # world sizes where every storage alive is counted
    adam_eps = 1e-8

    def build(self):
        return Nested()

    def members(self, world_size):
        return [list(range(world_size))]

    def group(self, ctx):
        groups = self.members(ctx.world_size)
        if groups == [list(range(ctx.world_size))]:
            return ctx.group
        made = [(m, ctx.new_group(m)) for m in groups]
        return next((g for m, g in made if ctx.rank in m), None)

    # ---------------------------------------------------------------- in every rank
    def run(self, ctx):
        group = self.group(ctx)
        if group is None:
            return
        before = memory.live_storages() if ctx.world_size in self.memory_sizes else None
        model = owned_module(self, "build", self.seed, ctx.rank).to(device=ctx.device,
                                                                     dtype=ctx.dtype)
        keys = list(model.state_dict())
        named_buffers = dict(model.named_buffers())
        buffers = list(named_buffers.values())
        with ctx.phase("init"):
            fsdp = ctx.impl.sharding.FullyShardedDataParallel(model, group=group)
        for n, b in named_buffers.items():
            ctx.record(f"init/buffer {n}", b)
        with ctx.phase("structure"):
            shards = list(fsdp.parameters())
        ctx.record("structure/this rank's shard of every unit, in order", h.shards_of(shards))
        with ctx.phase("full_state_dict"):
            full = fsdp.full_state_dict()
        h.record_state(ctx, "full_state_dict", keys, full)
        del full
        step = 0
        for opt_name, count in self.opt_steps:
            opt = make_optimizer(opt_name, fsdp.parameters(), eps=self.adam_eps)
            for _ in range(count):
                step += 1
                if not self.train_step(ctx, fsdp, opt, opt_name, step, before, buffers):
                    return
            ctx.record(f"step{step} {opt_name}/shard", h.shards_of(fsdp.parameters()))
        shards = list(fsdp.parameters())
        if before is not None:
            ctx.record_value(FSDP_HELD, h.held(before, shards, [p.grad for p in shards],
                                               opt.state, buffers, ctx.records, ctx.values,
                                               roots=[fsdp, opt]))
        ctx.record_value("memory/parameter bytes", memory.param_bytes(fsdp))
        ctx.record_value("memory/gradient bytes", memory.grad_bytes(fsdp))
        ctx.record_value("memory/optimizer state bytes", memory.optimizer_state_bytes(opt))
        with ctx.phase("full_state_dict after the steps"):
            full = fsdp.full_state_dict()
        h.record_state(ctx, "full_state_dict after the steps", keys, full)

    def train_step(self, ctx, fsdp, opt, opt_name, step, before, buffers) -> bool:
        first = step == 1
        fwd, bwd = ("forward", "backward") if first else (f"step{step} forward",
                                                          f"step{step} backward")
        x, y = (ctx.to(t) for t in h.own_batch(self, step, ctx.rank))
        weight = h.loss_weight(step, h.members_of(self, ctx.world_size, ctx.rank), ctx.rank)
        x.requires_grad_(first and x.is_floating_point())
        opt.zero_grad()
        trace = h.traced() if first else None
        try:
            with ctx.phase(fwd), (h.ComputeMarks() if first else _nothing()):
                out = fsdp(x)
        finally:
            h.untraced()
        ctx.record(f"{fwd}/output", out if isinstance(out, torch.Tensor) else None)
        if not isinstance(out, torch.Tensor) or (not hasattr(self, "loss") and
                                                 out.shape != y.shape):
            return False             # the verdict reports the output; the rest would be noise
        shards = list(fsdp.parameters())
        if first:
            ctx.record_value("forward/units gathered while the previous unit computed",
                             h.overlapped_gathers(trace))
            if before is not None:
                ctx.record_value(FORWARD_HELD, h.held(before, shards, buffers, ctx.records,
                                                      ctx.values, [x, y, out], roots=[fsdp]))
        loss = h.loss_of(self, out, y) * weight
        trace = h.traced() if first else None
        try:
            with ctx.phase(bwd), (h.ComputeMarks() if first else _nothing()):
                loss.backward()
        finally:
            h.untraced()
        del loss
        if first:
            ctx.record_value(GATHERED_AGAIN, h.gathered_bytes(bwd))
            ctx.record_value("backward/units gathered while a unit computed",
                             h.overlapped_gathers(trace))
            if x.is_floating_point():
                ctx.record("backward/grad input", x.grad)
            ctx.record("backward/gradient shard of every unit, in order", h.grads_of(shards))
        with ctx.phase(f"step{step} {opt_name}"):
            opt.step()
        return True

    # ---------------------------------------------------------------- in the parent
    def expected(self, world_size):
        exp = {}
        for members in self.members(world_size):
            exp.update({r: h.cast(self._expected_rank(members, g, world_size), self.dtype)
                        for g, r in enumerate(members)})
        return exp

    def _expected_rank(self, members, g, world_size) -> dict:
        serial, world, elsize = h.fsdp_serial(self, members), len(members), h.element_size(self)
        units, rank = serial["units"], members[g]
        sizes = [h.pieces(n, world) for n in h.unit_sizes(units, serial["init"])]
        shard_bytes, largest = sum(sizes) * elsize, max(sizes) * world * elsize
        e = {f"init/buffer {n}": serial["state0"][n] for n in serial["buffers"]}
        e["structure/this rank's shard of every unit, in order"] = h.fsdp_structure(
            serial, g, world, self.dtype)
        e.update({f"full_state_dict/{k}": v for k, v in serial["state0"].items()})
        e["forward/output"] = serial["outputs"][rank]
        e["forward/units gathered while the previous unit computed"] = Bound(
            low=len(units) - 1 if world > 1 else float("-inf"),
            what=f"every unit's gather but the first's, of {len(units)} units, posted before "
                 f"the previous unit's compute and waited after it")
        scan = world_size in self.memory_sizes
        if scan:
            e[FORWARD_HELD] = Bound(
                high=serial["activations"][rank] + 2 * largest + self.slack,
                what=f"the activations autograd saved ({serial['activations'][rank]} bytes) and "
                     f"at most two gathered units (the largest: {largest} bytes); all "
                     f"{len(units)} units gathered are {sum(sizes) * world * elsize}")
        # rule 'Memory' at every world size, where no storage is counted too: forward keeps at
        # most two gathered units, so backward gathers all the others again
        kept = sum(sorted(sizes)[-2:]) * elsize
        e[GATHERED_AGAIN] = Bound(
            low=shard_bytes - kept if world > 1 and len(units) > 2 else float("-inf"),
            what=f"forward keeps at most two gathered units, so backward all-gathers every other "
                 f"unit again: this rank's shards of all {len(units)} units ({shard_bytes} bytes) "
                 f"but the two largest ({kept})")
        e["backward/units gathered while a unit computed"] = Bound(
            low=1 if world > 1 and len(units) > 1 else float("-inf"),
            what="at least one unit's gather posted before a backward computes and waited after")
        if rank in serial["input grads"]:
            e["backward/grad input"] = serial["input grads"][rank]
        e["backward/gradient shard of every unit, in order"] = h.fsdp_shard(
            serial["grads"], units, g, world)
        step, dtype = 0, getattr(torch, self.dtype)
        for opt_name, count in self.opt_steps:
            step += count
            right, stale = (h.fsdp_shard(serial[(what, step, opt_name)], units, g, world).to(dtype)
                            for what in ("params", "stale"))
            e[f"step{step} {opt_name}/shard"] = right if step == 1 else Like(
                right, ((stale, h.STALE_GRAD, h.STALE_HINT),))
        if scan:
            e[FSDP_HELD] = Bound(high=largest + self.slack, what=(
                f"no gathered unit, no full gradient, nothing of the weights but the shards "
                f"(at most one unit's {largest} bytes: torch's gloo may hold the last "
                f"collective's buffer a moment longer); all {len(units)} units are "
                f"{sum(sizes) * world * elsize}"))
        states = 2 if self.opt_steps[-1][0] == "adam" else 1
        for what, factor in (("parameter", 1), ("gradient", 1), ("optimizer state", states)):
            e[f"memory/{what} bytes"] = Bound(
                0.9 * factor * shard_bytes, 1.1 * factor * shard_bytes + 64,
                what=f"this rank's shards{f' ({factor} states each)' if factor > 1 else ''}: "
                     f"{sum(sizes)} elements; the serial model has "
                     f"{sum(t.numel() for t in serial['init'].values())}")
        e.update({f"full_state_dict after the steps/{k}": v for k, v in serial["final"].items()})
        return e

    def comm_rules(self, world_size):
        rules = {}
        for members in self.members(world_size):
            world = len(members)
            mine = [] if world == 1 else self._rules(members, world_size)
            rules.update({r: mine for r in members})
        return rules

    def _rules(self, members, world_size) -> list:
        serial, world, elsize = h.fsdp_serial(self, members), len(members), h.element_size(self)
        units = serial["units"]
        sizes = [h.pieces(n, world) for n in h.unit_sizes(units, serial["init"])]
        shard, lay = sum(sizes) * elsize, len(units)
        group = tuple(members) if world < world_size else None
        n_init = len(serial["state0"])
        rules = [CommRule("init", "collective", Bound(1, n_init),
                          "the constructor broadcasts each parameter and buffer from group "
                          "rank 0, once", members=group),
                 CommRule("structure", "*", 0, "parameters() only lists the shards"),
                 CommRule("*", "p2p", 0, "FSDP communicates with collectives only")]
        for phase in ("full_state_dict", "full_state_dict after the steps"):
            rules += [CommRule(phase, "collective", Bound(1, lay),
                               "full_state_dict(): one all-gather per unit, nothing else",
                               members=group),
                      CommRule(phase, "all_gather", Bound(1, lay),
                               "full_state_dict(): one all-gather per unit (an all-reduce of a "
                               "zero-padded buffer moves N times the bytes)", members=group)]
        step = 0
        for opt_name, count in self.opt_steps:
            for _ in range(count):
                step += 1
                fwd, bwd = ("forward", "backward") if step == 1 else (f"step{step} forward",
                                                                      f"step{step} backward")
                rules += [
                    CommRule(fwd, "all_gather", Bound(1, lay), h.GATHER_ONCE,
                             nbytes=Bound(high=shard), members=group),
                    CommRule(fwd, "collective", Bound(1, lay), h.GATHER_ONCE),
                    CommRule(bwd, "all_reduce", 0, h.NO_ALL_REDUCE),
                    CommRule(bwd, "all_gather", Bound(1, lay), h.GATHER_ONCE + " (backward "
                             "gathers each unit again: forward freed it)",
                             nbytes=Bound(high=shard), members=group),
                    CommRule(bwd, "reduce_scatter", Bound(1, lay),
                             "backward reduce-scatters each unit's full gradient once",
                             nbytes=Bound(high=world * shard), members=group),
                    CommRule(bwd, "collective", Bound(2, 2 * lay),
                             "backward: all-gathers and reduce-scatters, one each per unit"),
                    CommRule(f"step{step} {opt_name}", "*", 0,
                             "the optimizer steps the shards: no communication")]
        return rules


class FSDPSubgroups(FSDPCheck):
    """Two independent FSDP groups, global ranks {0, 2} and {1, 3}, each with its own data:
    shards, gathers and reduce-scatters on `group` only, its group rank 0 (global rank 1 for
    {1, 3}) the source of the weights. One SGD step."""
    name = "FullyShardedDataParallel_subgroups"
    world_sizes = (4,)
    opt_steps = (("sgd", 1),)
    memory_sizes = ()                  # the Group rule here; memory is the check above's
    seed, data_seed = 17, 1700
    hints = dict(h.FSDP_HINTS, **{
        "error/init": h.GROUP_SRC,
        "error": "rule 'Group': the shard index and the number of shards are the GROUP rank and "
                 "size (dist.get_rank(group), dist.get_world_size(group)); every collective "
                 "on `group`; the broadcast's source dist.get_global_rank(group, 0)",
        "structure/": "rule 'Group': the shard index is the GROUP rank (dist.get_rank(group)) "
                      "and the number of shards the group's size; " + h.FSDP_HINTS["structure/"],
        "init/": "rule 'Group': the initial weights come from the group's rank 0, global rank "
                 "dist.get_global_rank(group, 0) (rank 1 for the group {1, 3})",
        "full_state_dict/": "rule 'Group': the initial weights come from the group's rank 0, "
                            "global rank dist.get_global_rank(group, 0) (rank 1 for the group "
                            "{1, 3}): broadcast from it"})

    def members(self, world_size):
        return [list(m) for m in h.PAIRS]


class FSDPAccumulated(AccumulatedFSDP):
    name = "FullyShardedDataParallel_accumulated"


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
