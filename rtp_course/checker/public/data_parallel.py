"""Public checks for E1 `data_parallel` (mini-DDP).

Data-parallel training on N ranks, each with its own 1/N of the batch, must
match serial training on the whole batch: same outputs per sample, the same
(averaged) gradients, the same weights after optimizer steps.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from rtp_course.checker.common import (global_randn, make_optimizer, mlp, named_grads,
                                       named_params, owned_module, randn, rank_slice, seeded)
from rtp_course.checker.public.data_parallel_harness import (  # noqa: F401 - hidden checks'
    N_PARAMS, OPTIMIZERS, PAIRS, ShiftedMLP, _FrozenAndSpare, group_rank, inner, pair_of,
    step_rules)
from rtp_course.checker.registry import Bound, Check, CommRule
from rtp_course.runtime import commlog

BATCH = 12          # divisible by 1, 2, 3 and 4
STEPS = 2
NEVER_WAITED = "works started with async_op=True and never waited"
# float64 MLPs and SGD/Adam on gradients that are never zero: a correct rank differs from
# serial by ~1e-15, while a float32 buffer on the way rounds every entry by up to 6e-8, under
# the default tolerance (1e-7, for checks with Adam noise) on some draws of the data.
TIGHT = {torch.float64: (1e-10, 1e-12)}


def own_batch(step: int, owner: int, ranks: int, seed: int = 0):
    """Rank `owner`'s (global rank) piece of the step's batch, 1/`ranks` of it: drawn from its
    own key, so no other rank can compute it (checker.inputs)."""
    rows = BATCH // ranks
    return (randn(100 + 7 * step + seed, rows, 8, owner=owner),
            randn(200 + 7 * step + seed, rows, 6, owner=owner))


def batch(step: int, owners, seed: int = 0):
    """The whole batch of the step (parent only): the pieces of the ranks `owners`, in order."""
    return (global_randn(100 + 7 * step + seed, BATCH, 8, owners=owners),
            global_randn(200 + 7 * step + seed, BATCH, 6, owners=owners))


def serial_run(init_seed: int, owners, data_seed: int = 0, factory=mlp,
               init_owner: int | None = None) -> dict:
    """Everything a rank should see, computed on one process with the whole batch of the
    ranks `owners`; the weights are `init_owner`'s (None: shared ones)."""
    out = {}
    model = seeded(factory, init_seed, owner=init_owner)
    out["params"] = named_params(model)
    x, y = batch(0, owners, data_seed)
    pred = model(x)
    F.mse_loss(pred, y).backward()
    out["output"], out["grads"] = pred.detach(), named_grads(model)
    for opt_name in OPTIMIZERS:
        model = seeded(factory, init_seed, owner=init_owner)
        opt = make_optimizer(opt_name, model.parameters())
        for k in range(1, STEPS + 1):
            opt.zero_grad()
            x, y = batch(k, owners, data_seed)
            F.mse_loss(model(x), y).backward()
            opt.step()
            out[(opt_name, k)] = named_params(model)
    return out


def expected_for(serial: dict, rank: int, world_size: int, with_init: bool) -> dict:
    exp = {}
    if with_init:
        exp[f"init/{NEVER_WAITED}"] = []
        exp.update({f"init/{n}": t for n, t in serial["params"].items()})
    exp["forward/output"] = rank_slice(serial["output"], rank, world_size)
    if with_init:
        exp[f"backward/{NEVER_WAITED}"] = []
    exp.update({f"backward/grad {n}": g for n, g in serial["grads"].items()})
    for opt_name in OPTIMIZERS:
        for k in range(1, STEPS + 1):
            exp.update({f"step{k} {opt_name}/{n}": t for n, t in serial[(opt_name, k)].items()})
    return exp


# torch's own DDP all-reduces in its C++ reducer, where no rule can judge what it sends.
TORCH_DDP = CommRule("*", "DistributedDataParallel", 0,
                     "rule 'Build it yourself': from torch.distributed collectives and autograd "
                     "hooks; torch's DistributedDataParallel is what this exercise rebuilds, "
                     "and it communicates in C++, where the checker cannot judge it")


class AverageGradients(Check):
    exercise, name = "data_parallel", "average_gradients"
    tolerance = TIGHT
    hints = {
        "backward/grad": "after average_gradients every rank must hold the MEAN over ranks of "
                         "the local gradients: all-reduce (sum) each .grad, then divide by the "
                         "world size of `group`",
        "step": "the gradients were right but the steps went wrong: average before opt.step()",
        "forward": "forward needs no communication: each rank runs its own slice",
    }

    def run(self, ctx):
        dp = ctx.impl.data_parallel
        model = seeded(mlp, 0).to(ctx.device)
        x, y = (ctx.to(t) for t in own_batch(0, ctx.rank, ctx.world_size))
        with ctx.phase("forward"):
            pred = model(x)
        ctx.record("forward/output", pred)
        F.mse_loss(pred, y).backward()
        with ctx.phase("backward"):
            dp.average_gradients(model, group=ctx.group)
        for n, g in named_grads(model).items():
            ctx.record(f"backward/grad {n}", g)
        for opt_name in OPTIMIZERS:
            model = seeded(mlp, 0).to(ctx.device)
            opt = make_optimizer(opt_name, model.parameters())
            for k in range(1, STEPS + 1):
                with ctx.phase(f"step{k} {opt_name}"):
                    opt.zero_grad()
                    x, y = (ctx.to(t) for t in own_batch(k, ctx.rank, ctx.world_size))
                    F.mse_loss(model(x), y).backward()
                    dp.average_gradients(model, group=ctx.group)
                    opt.step()
                for n, p in named_params(model).items():
                    ctx.record(f"step{k} {opt_name}/{n}", p)

    def expected(self, world_size):
        serial = serial_run(0, range(world_size))
        return {r: expected_for(serial, r, world_size, with_init=False) for r in range(world_size)}

    def comm_rules(self, world_size):
        if world_size == 1:
            return []
        return [CommRule("forward", "*", 0, "forward must not communicate"),
                CommRule("backward", "collective", Bound(1, N_PARAMS),
                         "rule 'Communication': a backward all-reduces each gradient at most "
                         "once: one all-reduce per parameter (or fewer, if you flatten them into "
                         "one buffer) and nothing else (a reduce and a broadcast are two "
                         "collectives)")] + step_rules()


class DataParallelWrapper(Check):
    exercise, name = "data_parallel", "DataParallel"
    tolerance = TIGHT
    hints = {
        f"init/{NEVER_WAITED}": "rule 'Communication': wait() on every work the constructor "
                                "starts with async_op=True before it returns; until then the "
                                "broadcast may still be writing the parameter, so a rank starts "
                                "from its own weights or sees them change in the middle of a step",
        "init/": "after the constructor the ranks' weights differ: it must copy group rank 0's "
                 "parameters (and buffers) to every rank (dist.broadcast from the global rank "
                 "of group rank 0; with async_op=True, wait() on each work before returning)",
        "forward": "forward is the wrapped module's forward on this rank's own batch",
        f"backward/{NEVER_WAITED}": "rule 'Communication': a work started with async_op=True "
                                    "in backward (in a hook) was never waited: wait() on it "
                                    "before backward returns (e.g. in a "
                                    "torch.autograd.Variable._execution_engine.queue_callback, "
                                    "or all_reduce without async_op), or the gradient may "
                                    "still be changing when the optimizer reads it",
        "backward/grad": "when loss.backward() returns, every .grad must already be the MEAN "
                         "over the ranks of `group`: each parameter's gradient all-reduced "
                         "(sum) once it is complete (a post-accumulate-grad hook fires then), "
                         "divided by the group's world size, and every async work waited",
        "step": "the weights after the optimizer steps are wrong: gradients are averaged once "
                "per backward (hooks registered once, a division by the world size of "
                "`group`), and every async work (a broadcast or all_reduce with async_op=True) "
                "is waited before its tensor is used",
    }
    seed_offset = 10
    data_seed = 0
    factory = staticmethod(mlp)
    owned = ("factory",)

    def groups(self, ctx):
        return ctx.group

    def run(self, ctx):
        dp = ctx.impl.data_parallel
        group = self.groups(ctx)
        gsize = group_rank(ctx, group)[1]
        def build():   # different weights on every rank on purpose: its own key's
            return owned_module(self, "factory", self.seed_offset, ctx.rank).to(ctx.device)
        with ctx.phase("init"):
            model = dp.DataParallel(build(), group=group)
        ctx.record_value(f"init/{NEVER_WAITED}", [
            f"{e.kind} at {e.where}" for e in commlog.events()
            if e.phase == "init" and not e.completed])
        for n, p in named_params(inner(model)).items():
            ctx.record(f"init/{n}", p)
        x, y = (ctx.to(t) for t in own_batch(0, ctx.rank, gsize, self.data_seed_of(ctx)))
        with ctx.phase("forward"):
            pred = model(x)
            loss = F.mse_loss(pred, y)
        ctx.record("forward/output", pred)
        with ctx.phase("backward"):
            loss.backward()
        ctx.record_value(f"backward/{NEVER_WAITED}", [
            f"{e.kind} at {e.where}" for e in commlog.events()
            if e.phase == "backward" and not e.completed])
        for n, g in named_grads(inner(model)).items():
            ctx.record(f"backward/grad {n}", g)
        for opt_name in OPTIMIZERS:
            with ctx.phase("init"):
                model = dp.DataParallel(build(), group=group)
            opt = make_optimizer(opt_name, model.parameters())
            for k in range(1, STEPS + 1):
                with ctx.phase(f"step{k} {opt_name}"):
                    opt.zero_grad()
                    x, y = (ctx.to(t) for t in own_batch(k, ctx.rank, gsize,
                                                          self.data_seed_of(ctx)))
                    F.mse_loss(model(x), y).backward()
                    opt.step()
                for n, p in named_params(inner(model)).items():
                    ctx.record(f"step{k} {opt_name}/{n}", p)

    def data_seed_of(self, ctx):
        return self.data_seed

    def expected(self, world_size):
        serial = serial_run(self.seed_offset, range(world_size), data_seed=self.data_seed,
                            factory=self.factory, init_owner=0)
        return {r: expected_for(serial, r, world_size, with_init=True) for r in range(world_size)}

    def comm_rules(self, world_size):
        if world_size == 1:
            return [TORCH_DDP]
        return [TORCH_DDP, CommRule("forward", "*", 0, "forward must not communicate: DDP only "
                         "communicates at construction and during backward"),
                CommRule("init", "broadcast|collective", Bound(1, 64),
                         "the constructor must broadcast rank 0's parameters")] + step_rules()


class DataParallelBuffers(DataParallelWrapper):
    """Rule 'Results' (parameters AND buffers come from group rank 0): a module whose buffer
    differs on every rank."""
    name = "DataParallel_buffers"
    factory = staticmethod(ShiftedMLP)
    hints = dict(DataParallelWrapper.hints)
    hints["forward"] = ("the ranks agree on the parameters but not on the output: the "
                        "constructor must broadcast the module's buffers too (module.buffers(): "
                        "running statistics, fixed tables), from group rank 0")


class DataParallelFrozenAccumulated(Check):
    """The configurations real training uses: a frozen first layer (requires_grad=False: no
    hook can be registered on it, and it gets no gradient), a layer forward does not use (no
    gradient, no hook call: nothing may wait for it), gradients accumulated over two backward
    passes without zero_grad (serial PyTorch sums them), the second after two forwards, and
    a last rank whose first loss is zero (its gradients are zero: it all-reduces them all the
    same, or the others wait for it)."""
    exercise, name = "data_parallel", "DataParallel_frozen_accumulated"
    tolerance = TIGHT
    task = "E1.2"
    seed = 17
    hints = {
        "error/init": "register hooks only on parameters that require grad "
                      "(p.requires_grad): a frozen one takes no hook and gets no gradient",
        "frozen": "a frozen parameter (requires_grad=False) gets no gradient and no all-reduce: "
                  "leave its .grad None",
        "unused": "a parameter forward did not use gets no gradient (its hook never fires): "
                  "leave its .grad None, and never wait for it (averaging the others only once "
                  "every parameter has reported leaves them local)",
        "backward/grad": "after two backward passes without zero_grad every trainable .grad "
                         "must be the SUM of both passes' means, as in serial PyTorch: in each "
                         "backward, average the gradient autograd accumulated (p.grad, in "
                         "place), never replace p.grad by the latest pass's alone, and never "
                         "wait for a parameter forward did not use (its hook never fires)",
        "deadlock": "every rank makes the same collectives whatever its data: here the last "
                    "rank's first loss is zero, so are its gradients, and it must all-reduce "
                    "them all the same (a rank that skips a zero gradient leaves the others "
                    "waiting)",
    }

    spare = staticmethod(_FrozenAndSpare)
    owned = ("spare",)

    def build(self, seed, owner):
        return owned_module(self, "spare", seed, owner)

    @staticmethod
    def losses(model, k, rank, world, data):
        """Pass k's loss on `rank`: zero on the last rank's first pass; two forwards in the
        second. `data(seed, rank, world)` gives a batch and its targets."""
        seeds = (10,) if k == 0 else (11, 12)
        loss = sum(F.mse_loss(model(x), y) for x, y in (data(sd, rank, world) for sd in seeds))
        return loss * 0 if k == 0 and world > 1 and rank == world - 1 else loss

    def run(self, ctx):
        dp = ctx.impl.data_parallel
        with ctx.phase("init"):
            model = dp.DataParallel(self.build(self.seed, ctx.rank).to(ctx.device),
                                    group=ctx.group)
        data = lambda sd, r, w: (ctx.to(t) for t in own_batch(sd, r, w))  # noqa: E731
        for k in range(2):
            loss = self.losses(model, k, ctx.rank, ctx.world_size, data)
            with ctx.phase(f"backward {k + 1}"):
                loss.backward()
        for n, g in named_grads(inner(model)).items():
            if n.startswith(("net.0.", "spare.")):
                what = "frozen" if n.startswith("net.0.") else "unused"
                ctx.record_value(f"{what}/{n} has no gradient", g is None)
            else:
                ctx.record(f"backward/grad {n} after two backward passes", g)

    def expected(self, world_size):
        model = self.build(self.seed, 0)
        for k in range(2):      # the mean over ranks of each rank's loss: serial DDP
            sum(self.losses(model, k, r, world_size, own_batch)
                for r in range(world_size)).backward(torch.tensor(1.0 / world_size,
                                                                  dtype=torch.float64))
        e = {}
        for n, g in named_grads(model).items():
            if n.startswith(("net.0.", "spare.")):
                what = "frozen" if n.startswith("net.0.") else "unused"
                e[f"{what}/{n} has no gradient"] = True
            else:
                e[f"backward/grad {n} after two backward passes"] = g
        return {r: dict(e) for r in range(world_size)}

    def comm_rules(self, world_size):
        if world_size == 1:
            return [TORCH_DDP]
        trainable = N_PARAMS - 2
        return [TORCH_DDP] + [CommRule(f"backward {k}", "collective", Bound(1, trainable),
                         "each backward averages the gradients of the parameters it computed "
                         "(one all-reduce each, or fewer with a flat buffer) before it returns; "
                         "a frozen parameter or one forward did not use has none, and nothing "
                         "may wait for it") for k in (1, 2)]


class AverageGradientsSubgroups(Check):
    """Two independent data-parallel pairs, ranks {0, 2} and {1, 3}, each with its own data:
    average_gradients must average over `group` only (not over the world, nor over ranks
    assumed consecutive)."""
    exercise, name = "data_parallel", "average_gradients_subgroups"
    tolerance = TIGHT
    world_sizes = (4,)
    hints = {"backward/grad": "average over the ranks of `group` only: all_reduce(p.grad, "
                              "group=group), then divide by dist.get_world_size(group)"}

    def run(self, ctx):
        group = [ctx.new_group(m) for m in PAIRS][ctx.rank % 2]
        model = seeded(mlp, 0).to(ctx.device)
        x, y = (ctx.to(t) for t in own_batch(0, ctx.rank, 2))
        F.mse_loss(model(x), y).backward()
        with ctx.phase("backward"):
            ctx.impl.data_parallel.average_gradients(model, group=group)
        for n, g in named_grads(model).items():
            ctx.record(f"backward/grad {n}", g)

    def expected(self, world_size):
        exp = {}
        for r in range(world_size):
            serial = serial_run(0, pair_of(r))
            exp[r] = {k: v for k, v in expected_for(serial, pair_of(r).index(r), 2,
                                                    with_init=False).items()
                      if k.startswith("backward/")}
        return exp

    def comm_rules(self, world_size):
        return {r: [CommRule("backward", "collective", Bound(1, N_PARAMS),
                             "one all-reduce per parameter over `group` (or fewer, flattened)",
                             members=tuple(pair_of(r)))] for r in range(world_size)}


class DataParallelSubgroups(DataParallelWrapper):
    """Two independent data-parallel groups, ranks {0, 2} and {1, 3}: `group` must be
    honoured, and its ranks are not consecutive."""
    name = "DataParallel_subgroups"
    world_sizes = (4,)
    hints = dict(DataParallelWrapper.hints)
    hints["init/"] = hints["error/init"] = (
        "the broadcast source is group rank 0, whose GLOBAL rank is dist.get_global_rank(group, "
        "0): rank 1 for the group {1, 3} (the group's ranks need not be consecutive)")

    def groups(self, ctx):
        return [ctx.new_group(m) for m in PAIRS][ctx.rank % 2]

    def expected(self, world_size):
        exp = {}
        for r in range(world_size):
            pair = pair_of(r)
            serial = serial_run(self.seed_offset, pair, data_seed=self.data_seed,
                                init_owner=pair[0])
            exp[r] = expected_for(serial, pair.index(r), 2, with_init=True)
        return exp

    def comm_rules(self, world_size):
        rules = super().comm_rules(world_size)
        return {r: [CommRule(x.phase, x.kind, x.count, x.hint, members=tuple(pair_of(r)))
                    if x.kind == "collective" else x for x in rules] for r in range(world_size)}
