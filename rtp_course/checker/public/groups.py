"""Public checks for E6 `groups`: the 2D process groups, and 2D training against serial.

`build_groups` must follow the documented layout (rank = dp_rank * T + tp_rank: TP
groups of consecutive ranks, DP groups of the ranks holding the same shard), every
rank must make the same dist.new_group calls in the same order (watched, and
compared through the store: a mismatch usually hangs, sometimes cross-wires the
groups), and the groups must connect their members (a first all_reduce on each).
2D training: replica d (a TP group) feeds its own batch, the same on all its
ranks; the result must equal serial training on the D batches concatenated
(replica 0's first). Replicas start from DIFFERENT random models on purpose:
parallelize_2d must broadcast replica 0's. Rank (t, d) is then compared with
shard t of the serial model: after parallelize_2d, after sync_gradients, and
after SGD steps (the student's sync_gradients) and Adam steps (train_step_2d).
"""
from __future__ import annotations

import contextlib
import copy
import json

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from rtp_course.runtime import commlog
from rtp_course.checker.common import make_optimizer, owned_module
from rtp_course.checker.public.tensor_parallel import Model
from rtp_course.checker.public.tensor_parallel_harness import (
    OPTIMIZERS, cut_all, expected_grads, frozen, frozen_names, layout, raises, record_grads,
    record_structure, tensors)
from rtp_course.checker.registry import Bound, Check, CommRule

ONE_PER_PARAMETER = ("rule 'Communication': sync_gradients makes at most one collective per "
                     "parameter (one all-reduce on groups.dp_group each, or fewer with a flat "
                     "buffer); replicated parameters are already equal inside a TP group, so "
                     "nothing goes over tp_group")
SYNC_GROUP = ("rule 'Group': sync_gradients averages every gradient over groups.dp_group, the "
              "ranks holding the same shard, and over nothing else (never tp_group, never the "
              "world): if it calls a helper, such as your E1 average_gradients, that helper "
              "must use the group it is given")
LAYOUT = ("rank = dp_rank * T + tp_rank: TP group d is the consecutive ranks [d*T, d*T + T), "
          "DP group t the ranks [t, t + T, t + 2T, ...]; tp_rank = rank % T, dp_rank = rank // T")


def expected_groups(rank, world, tp):
    t, d = rank % tp, rank // tp
    return {"structure/tp_group ranks": [d * tp + i for i in range(tp)],
            "structure/dp_group ranks": list(range(t, world, tp)),
            "structure/(tp_rank, dp_rank)": [t, d],
            "structure/(tp_size, dp_size)": [tp, world // tp]}


def record_groups(ctx, g):
    ranks = lambda pg: None if pg is None else dist.get_process_group_ranks(pg)  # noqa: E731
    ctx.record_value("structure/tp_group ranks", ranks(g.tp_group))
    ctx.record_value("structure/dp_group ranks", ranks(g.dp_group))
    ctx.record_value("structure/(tp_rank, dp_rank)", [g.tp_rank, g.dp_rank])
    ctx.record_value("structure/(tp_size, dp_size)", [g.tp_size, g.dp_size])


SAME_ORDER = "structure/dist.new_group calls, the same on every rank"
PROBE = "all_reduce on the new groups"


@contextlib.contextmanager
def watching_new_group(module):
    """Log the ranks of every dist.new_group call inside, however `module` imported it."""
    calls, original = [], dist.new_group

    def spy(ranks=None, *args, **kwargs):
        call = None if ranks is None else sorted(ranks)
        # only the members make a use_local_synchronization call: not compared across ranks
        calls.append({"members only": call} if kwargs.get("use_local_synchronization") else call)
        tell = commlog.STATE.on_status or (lambda text: None)  # the watchdog's "waited in"
        tell(f"dist.new_group({calls[-1]}), call {len(calls)} of build_groups")
        try:
            return original(ranks, *args, **kwargs)
        finally:
            tell(None)
    owners = [dist, c10d] + ([module] if getattr(module, "new_group", None) is original else [])
    for owner in owners:
        owner.new_group = spy
    try:
        yield calls
    finally:
        for owner in owners:
            owner.new_group = original


def same_on_every_rank(ctx, calls) -> str:
    """Compare this rank's new_group calls with every rank's, without a collective (groups
    created in different orders can leave the ranks' collectives mismatched): ctx.first_other
    says which rank, if any, made other calls. Calls with use_local_synchronization=True are
    made by their members only: each must hold the rank that made it, and they are left out
    of the comparison."""
    for call in calls:
        if isinstance(call, dict) and ctx.rank not in (call["members only"] or [ctx.rank]):
            return (f"no: rank {ctx.rank} called dist.new_group({call['members only']}, "
                    f"use_local_synchronization=True), a group it is not in")
    job_wide = [c for c in calls if not isinstance(c, dict)]
    other = ctx.first_other(json.dumps(job_wide))
    if other is not None:
        return (f"no: rank {ctx.rank} created {job_wide}, rank {other} created other groups "
                f"(or the same in another order)")
    return "yes"


def probe_groups(ctx, g):
    """Sum the global ranks over each group: groups wired to the wrong peers give another sum."""
    for what, pg in (("tp_group", g.tp_group), ("dp_group", g.dp_group)):
        t = ctx.to(torch.tensor([float(ctx.rank)]))
        dist.all_reduce(t, group=pg)
        ctx.record_value(f"structure/sum of ranks over {what}", int(t.item()))


class BuildGroups(Check):
    exercise, name, world_sizes = "groups", "build_groups", (2, 4)
    tp_size = 2
    DEADLOCK = ("rule 'Layout': dist.new_group is collective over the WHOLE job: every rank "
                "must create every group, members or not, in the same order (all TP groups "
                "d = 0..D-1, then all DP groups t = 0..T-1) and keep its own (or only the "
                "members call it, each with use_local_synchronization=True)")
    hints = {"structure/": LAYOUT, "deadlock": DEADLOCK, "error/build_groups": DEADLOCK,
             f"error/{PROBE}": DEADLOCK, SAME_ORDER: DEADLOCK,
             "structure/sum of ranks": "the groups report the right members but do not connect "
                                       "them: " + DEADLOCK,
             "structure/build_groups(3)": "rule 'Raises': check tp_size first: raise ValueError "
                                          "when it does not divide the world size, before "
                                          "creating any group (a group made by some ranks and "
                                          "not others leaves the job's next new_group calls "
                                          "mismatched)"}

    def run(self, ctx):
        G = ctx.impl.groups
        with ctx.phase("build_groups"), watching_new_group(G) as calls:
            groups = G.build_groups(self.tp_size)
        record_groups(ctx, groups)
        with ctx.phase("build_groups (comparing the ranks' dist.new_group calls)"):
            same = same_on_every_rank(ctx, calls)
        ctx.record_value(SAME_ORDER, same)
        if same == "yes":   # mismatched groups would only hang here
            with ctx.phase(PROBE):
                probe_groups(ctx, groups)
        with ctx.phase("build_groups"), watching_new_group(G) as made:
            ctx.record_value("structure/build_groups(3) raises",
                             raises(lambda: G.build_groups(3))[0])
        ctx.record_value("structure/build_groups(3) creates no group before raising", made == [])

    def expected(self, world_size):
        exp = {}
        for r in range(world_size):
            e = expected_groups(r, world_size, self.tp_size)
            e[SAME_ORDER] = "yes"
            for what in ("tp_group", "dp_group"):
                e[f"structure/sum of ranks over {what}"] = sum(e[f"structure/{what} ranks"])
            e["structure/build_groups(3) raises"] = "ValueError"
            e["structure/build_groups(3) creates no group before raising"] = True
            exp[r] = e
        return exp


def replica(d: int, tp: int) -> tuple:
    """The global ranks of replica (TP group) d: its batch and initial weights are theirs, drawn
    from their key (checker.inputs): another replica cannot make them."""
    return tuple(range(d * tp, (d + 1) * tp))


class Train2D(Check):
    """TP over tp_size ranks x DP over the rest, on a tiny course model."""
    exercise, name, world_sizes = "groups", "train_2d_bert", (2, 4)
    tp_size, batch, steps, case = 2, 2, 2, Model()
    owned = ("case.build",)     # each TP group (a replica) builds the model from its own key
    hints = {
        "init/": "after parallelize_2d, rank (tp_rank t, dp_rank d) holds shard t of REPLICA 0's "
                 "model: parallelize_transformer on groups.tp_group, then broadcast every "
                 "parameter and buffer over groups.dp_group from its first rank "
                 "(src = dist.get_global_rank(groups.dp_group, 0)); here the replicas start from "
                 "different random weights on purpose. " + LAYOUT,
        "forward/output": "each replica runs its own batch through its TP group (groups.tp_group); "
                          "the output must be that replica's rows of the serial output. " + LAYOUT,
        "sync/grad": "after sync_gradients EVERY gradient (shards and replicated LayerNorms / head "
                     "alike) must be the MEAN over groups.dp_group of the replicas' gradients: "
                     "all-reduce (sum) on dp_group, then divide by dp_size; never on tp_group, "
                     "which holds different shards",
        "step": "train_step_2d: optimizer.zero_grad(), loss_fn(model(inputs), targets), "
                "loss.backward(), sync_gradients(model, groups), optimizer.step(); return the loss",
        "adam/loss": "train_step_2d returns the loss of this replica's batch, detached",
        "error/sync": "rule 'Frozen and unused': a parameter that does not require grad (here "
                      "the BERT's positional table) has no gradient: its .grad is None, which "
                      "sync_gradients skips",
        "(frozen)": "rule 'Frozen and unused': a frozen parameter (requires_grad=False) stays "
                    "frozen in its shard and gets no gradient",
        "deadlock": "if build_groups fails, fix it first; then every rank of a TP group must run "
                    "the same layers on the same shapes, and every rank must call sync_gradients",
    }

    def run(self, ctx):
        G, T, case = ctx.impl.groups, self.tp_size, self.case
        t, d = ctx.rank % T, ctx.rank // T        # the documented layout, whatever G reports
        with ctx.phase("build_groups"):
            groups = G.build_groups(T)
        serial = owned_module(self, "case.build", case.seed, replica(d, T)).to(
            device=ctx.device, dtype=ctx.dtype)
        pieces, still = layout(serial), frozen(serial)
        for i, opt_name in enumerate(OPTIMIZERS):
            with ctx.phase("init"):
                model = G.parallelize_2d(copy.deepcopy(serial), groups)
            if i == 0 and not record_structure(ctx, model, pieces, tensors(serial, "value"), t, T,
                                               phase="init"):
                return
            opt = make_optimizer(opt_name, model.parameters())
            for k in range(1, self.steps + 1):
                x, y = (ctx.to(v) for v in case.inputs(k, self.batch, owner=replica(d, T)))
                first, tag = i == 0 and k == 1, f"step{k} {opt_name}"
                if opt_name == "adam":
                    with ctx.phase(tag):
                        loss = G.train_step_2d(model, opt, case.loss, x, y, groups)
                    ctx.record(f"{tag}/loss", loss)
                else:
                    opt.zero_grad()
                    with ctx.phase("forward" if first else tag):
                        out = model(x)
                    if first:
                        ctx.record("forward/output", out)
                    with ctx.phase("backward" if first else tag):
                        case.loss(out, y).backward()
                    with ctx.phase("sync" if first else tag):
                        G.sync_gradients(model, groups)
                    if first:
                        record_grads(ctx, "sync/grad ", pieces, model, still)
                    with ctx.phase(tag):
                        opt.step()
                for p in pieces:
                    ctx.record(f"{tag}/{p.name}", model.get_parameter(p.name))

    def serial_trace(self, dp):
        """Serial training on the concatenated batch of `dp` replicas, from replica 0's
        weights."""
        key = (self.id, dp, self.dtype)
        if key not in _TRACES:
            case, b, dtype, T = self.case, self.batch, getattr(torch, self.dtype), self.tp_size
            first = replica(0, T)
            tr = {"init": tensors(case.serial(owner=first).to(dtype), "value"),
                  "frozen": frozen(case.serial(owner=first))}
            for opt_name in OPTIMIZERS:
                model = case.serial(owner=first).to(dtype)
                opt = make_optimizer(opt_name, model.parameters())
                for k in range(1, self.steps + 1):
                    batches = [case.inputs(k, b, owner=replica(d, T)) for d in range(dp)]
                    x, y = (torch.cat(v) for v in zip(*batches))
                    opt.zero_grad()
                    out = model(x)
                    case.loss(out, y).backward()
                    if opt_name == "sgd" and k == 1:
                        tr.update(output=out.detach(), grads=tensors(model, "grad"))
                    tr[(opt_name, k, "loss")] = [
                        case.loss(out[d * b:(d + 1) * b], y[d * b:(d + 1) * b]).detach()
                        for d in range(dp)]
                    opt.step()
                    tr[(opt_name, k)] = tensors(model, "value")
            tr["pieces"] = layout(model)
            _TRACES[key] = tr
        return _TRACES[key]

    def expected(self, world_size):
        T, b = self.tp_size, self.batch
        tr = self.serial_trace(world_size // T)
        pieces, exp = tr["pieces"], {}
        for r in range(world_size):
            t, d = r % T, r // T
            e = {"init/parameters": sorted(p.name for p in pieces),
                 "init/frozen parameters (requires_grad=False)": frozen_names(pieces,
                                                                              tr["frozen"])}
            e.update(cut_all(pieces, tr["init"], t, T, "init/"))
            e["forward/output"] = tr["output"][d * b:(d + 1) * b]
            e.update(expected_grads(pieces, tr["grads"], tr["frozen"], t, T, "sync/grad "))
            for opt_name in OPTIMIZERS:
                for k in range(1, self.steps + 1):
                    if opt_name == "adam":
                        e[f"step{k} adam/loss"] = tr[(opt_name, k, "loss")][d]
                    e.update(cut_all(pieces, tr[(opt_name, k)], t, T, f"step{k} {opt_name}/"))
            exp[r] = e
        return exp

    def comm_rules(self, world_size):
        serial = self.case.serial()
        n_params = len(layout(serial))   # the parallel model's parameters
        # the TP layers' own collectives: per block, attention and MLP all-reduce once each way;
        # the embeddings (two at most) all-gather in forward
        blocks = len(getattr(serial, "blocks", None) or serial.layers)
        fwd, bwd = 2 * blocks + 2, 2 * blocks
        whole = ("rule 'Communication' over a whole step: forward and backward make only the "
                 "TP layers' collectives, and the gradients are averaged once, in "
                 "sync_gradients (a data-parallel hook left registered, e.g. by DataParallel, "
                 "all-reduces every gradient a second time)")
        T = self.tp_size
        dp = lambda r: tuple(range(r % T, world_size, T))          # noqa: E731
        tp = lambda r: tuple(range(r - r % T, r - r % T + T))     # noqa: E731
        return {r: self._rules(n_params, fwd, bwd, whole, dp(r), tp(r)) for r in range(world_size)}

    def _rules(self, n_params, fwd, bwd, whole, dp, tp) -> list:
        """One rank's rules: the averaging on its DP group, the layers' calls on its TP group."""
        layers = (whole + "; rule 'Group': here each collective is a TP layer's, on "
                  "groups.tp_group: one on another group is a data-parallel hook left registered "
                  "or a layer given the wrong group")
        rules = [CommRule("sync", "collective", Bound(high=n_params), SYNC_GROUP, members=dp),
                 CommRule("sync", "collective", Bound(high=n_params), ONE_PER_PARAMETER),
                 CommRule("forward", "collective", Bound(high=fwd), layers, members=tp),
                 CommRule("backward", "collective", Bound(high=bwd), layers, members=tp)]
        for opt_name in OPTIMIZERS:
            for k in range(1, self.steps + 1):
                if opt_name == "sgd" and k == 1:
                    continue    # its forward, backward and sync are phases of their own
                rules.append(CommRule(f"step{k} {opt_name}", "collective",
                                      Bound(high=fwd + bwd + n_params), whole))
        return rules


class Parallelize2D(Train2D):
    """E6.2 alone, on groups the check makes itself (the documented layout: all TP groups,
    then all DP groups), so that a build_groups bug does not hide it: after parallelize_2d,
    rank (t, d) holds shard t of replica 0's model, though every replica starts from its own
    weights."""
    name, task = "parallelize_2d", "E6.2"
    hints = {"init/": Train2D.hints["init/"], "deadlock": Train2D.hints["deadlock"]}

    def run(self, ctx):
        G, T, case = ctx.impl.groups, self.tp_size, self.case
        W = ctx.world_size
        t, d = ctx.rank % T, ctx.rank // T
        tps = [ctx.new_group(list(range(i * T, (i + 1) * T))) for i in range(W // T)]
        dps = [ctx.new_group(list(range(j, W, T))) for j in range(T)]
        groups = G.ParallelGroups(tps[d], dps[t], T, W // T, t, d)
        serial = owned_module(self, "case.build", case.seed, replica(d, T)).to(
            device=ctx.device, dtype=ctx.dtype)
        pieces = layout(serial)
        with ctx.phase("init"):
            model = G.parallelize_2d(copy.deepcopy(serial), groups)
        record_structure(ctx, model, pieces, tensors(serial, "value"), t, T, phase="init")

    def expected(self, world_size):
        T = self.tp_size
        tr = self.serial_trace(world_size // T)
        exp = {}
        for r in range(world_size):
            t = r % T
            e = {"init/parameters": sorted(p.name for p in tr["pieces"]),
                 "init/frozen parameters (requires_grad=False)": frozen_names(tr["pieces"],
                                                                              tr["frozen"])}
            e.update(cut_all(tr["pieces"], tr["init"], t, T, "init/"))
            exp[r] = e
        return exp

    def comm_rules(self, world_size):
        return []


_TRACES: dict = {}
