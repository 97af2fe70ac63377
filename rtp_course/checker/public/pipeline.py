"""Public checks for E9 `pipeline`: stages, GPipe and 1F1B against serial training.

Every rank builds the same model of L blocks (Linear(8, 8) + Tanh) and the same batch of 12
rows; rank r's stage must hold blocks r*L//N .. (r+1)*L//N - 1 (rule 'Layout'). A schedule over
M micro-batches must give the last stage the whole batch's mean loss, every stage serial
training's gradients on the whole batch (added to .grad) and, after SGD and Adam steps,
serial's weights. Each rank's stage is traced from outside (pipeline_harness.StageTrace): the
order of its forwards and backwards (rule 'Schedule') and how many micro-batches' saved
activations were alive at once (rule 'Memory'). Each rank's p2p calls are counted, their peers
checked, and their order replayed under NCCL's stream rules (runtime/nccl: a mis-ordered
send/recv that gloo completes is reported as the hang it would be on a GPU).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from rtp_course.checker.common import randn, seeded
from rtp_course.checker.public.pipeline_harness import (  # noqa: F401 - also the hidden checks'
    ACCUMULATED, DP_AVERAGE, DP_GRADS, DP_PP_STAGES, GPIPE_ORDER, GRADS, LOSS, MEMORY_1F1B,
    OPTIMIZERS, ORDER_1F1B, STEPS,
    STEPS_WRONG, STUCK, WIDTH, WRONG_CUT, StageTrace, batch, blocks, cast, cut, mistakes,
    dp_pp_groups, own_names, record_steps, schedule_1f1b, schedule_gpipe, serial, shard_loss,
    traffic_rules)
from rtp_course.checker.public.rotation_harness import NEVER_WAITED, others, record_unwaited
from rtp_course.checker.registry import Bound, Check, CommRule, Like
from rtp_course.runtime import asked

LAST_LOSS = ("returning only the last micro-batch's loss (loss_fn / M of micro-batch M-1) "
             "instead of the sum of the M scaled losses")
SENT_NONE = ("a send was given None: x_i.grad is None when the received activation x_i never "
             "required grad (x_i.requires_grad_() after the receive, before the forward), or "
             "when no backward reached it yet; rule 'Results': the gradient sent back is x_i.grad")
SIZE_ERROR = ("shapes that do not match: what travels between stages is ONE micro-batch's "
              "activation, [B / M, D]: allocate each receive buffer as "
              "torch.empty_like(inputs.chunk(M)[i]) (not of the whole batch, nor of the "
              "targets), and pair out_i with targets.chunk(M)[i]")
DETACHED = "returned loss is detached (requires_grad False)"
WAIT_EVERY = ("rule 'Wait on every work': wait() on every work isend, irecv or "
              "dist.batch_isend_irecv returns (the send's too) before the schedule goes on "
              "with its tensor or returns")
DETACHED_LOSS = ("rule 'Results': the returned loss is detached: add up loss_i.detach() (a "
                 "loss still in the graph keeps every micro-batch's graph reachable and invites "
                 "a second backward through freed buffers)")
NOT_COMMUNICATE = ("rule 'Communication': stage_layers and PipelineStage only compute: no "
                   "communication")


# stage_layers and PipelineStage on the group of ranks 1 .. N-1 as well (from 2 ranks): group
# rank and size differ from the world's, so r, N or is_first taken from the world show.
SUBGROUP = "group of ranks 1.."
GROUP_RANK = ("rule 'Group': r and N are this rank's place in `group` and its size "
              "(dist.get_rank(group), dist.get_world_size(group)), never the world's: is_first "
              "is group rank 0, is_last group rank N - 1, and prev / next are the GLOBAL ranks "
              "of group ranks r - 1 and r + 1 (dist.get_global_rank(group, r - 1))")


def subgroup(ctx):
    """(group of ranks 1 .. N-1, this rank's place in it or None); every rank makes it."""
    if ctx.world_size < 2:
        return None, None
    members = list(range(1, ctx.world_size))
    group = ctx.new_group(members)
    return group, members.index(ctx.rank) if ctx.rank in members else None


def subgroup_phase(world_size) -> str:
    return f"{SUBGROUP}{world_size - 1}"


class StageLayers(Check):
    """stage_layers for models of 4, 6 and 7 blocks (uneven cuts at 3 and 4 ranks)."""
    exercise, name = "pipeline", "stage_layers"
    cpu_budget = 20.0
    sizes = (4, 6, 7)
    hints = {"": WRONG_CUT, SUBGROUP: GROUP_RANK}

    def run(self, ctx):
        self.cuts(ctx, "", ctx.group, ctx.rank)
        group, g = subgroup(ctx)
        if g is not None:
            self.cuts(ctx, f"{subgroup_phase(ctx.world_size)} ", group, g)

    def cuts(self, ctx, prefix, group, g):
        for L in self.sizes:
            with ctx.phase(f"{prefix}L={L}"):
                found = ctx.impl.pipeline.stage_layers(L, group=group)
            try:
                found = tuple(int(v) for v in found)
            except Exception:  # noqa: BLE001 - anything else is reported as it is
                found = repr(found)[:80]
            ctx.record_value(f"{prefix}L={L}/(start, stop) of stage {g}", found)

    def expected(self, world_size):
        exp = {r: {f"L={L}/(start, stop) of stage {r}": cut(r, world_size, L) for L in self.sizes}
               for r in range(world_size)}
        prefix = subgroup_phase(world_size)
        for g, r in enumerate(range(1, world_size)):
            exp[r].update({f"{prefix} L={L}/(start, stop) of stage {g}": cut(g, world_size - 1, L)
                           for L in self.sizes})
        return exp

    def comm_rules(self, world_size):
        return [CommRule("*", "*", 0, NOT_COMMUNICATE)]


class PipelineStageForward(Check):
    """PipelineStage: which blocks it holds (the model's own), its neighbours, its forward."""
    exercise, name = "pipeline", "PipelineStage"
    cpu_budget = 20.0
    num_layers = 6
    hints = {"": WRONG_CUT, SUBGROUP: GROUP_RANK,
             "neighbours": "rule 'Group': is_first / is_last from the group rank; prev and next "
                           "are the GLOBAL ranks of stages r-1 and r+1 "
                           "(dist.get_global_rank(group, r - 1)), None where there is none",
             "forward/output": "rule 'Results': forward(x) runs this stage's blocks, in order, "
                               "on x: self.layers(x)"}

    def run(self, ctx):
        self.build(ctx, "", ctx.group, ctx.rank, ctx.world_size, forward=True)
        group, g = subgroup(ctx)
        if g is not None:
            self.build(ctx, f"{subgroup_phase(ctx.world_size)} ", group, g, ctx.world_size - 1)

    def build(self, ctx, prefix, group, g, n, forward=False):
        model = seeded(lambda: blocks(self.num_layers), 0).to(device=ctx.device, dtype=ctx.dtype)
        with ctx.phase(f"{prefix}construct"):
            stage = ctx.impl.pipeline.PipelineStage(model, group=group)
        mine = {id(p) for p in stage.parameters()}
        ctx.record_value(f"{prefix}construct/blocks whose own parameters the stage holds",
                         [i for i, b in enumerate(model)
                          if any(id(p) in mine for p in b.parameters())])
        ctx.record_value(f"{prefix}neighbours/(is_first, is_last, prev, next)",
                         repr((bool(stage.is_first), bool(stage.is_last), stage.prev, stage.next)))
        if forward:
            start, stop = cut(g, n, self.num_layers)
            x = ctx.to(randn(310 + start, 3, WIDTH))
            with ctx.phase("forward"):
                ctx.record("forward/output", stage(x))

    def expected(self, world_size):
        model = seeded(lambda: blocks(self.num_layers), 0)
        exp = {}
        for r in range(world_size):
            start, stop = cut(r, world_size, self.num_layers)
            with torch.no_grad():
                out = model[start:stop](randn(310 + start, 3, WIDTH))
            exp[r] = {**self.holds("", r, world_size, list(range(world_size))),
                      "forward/output": out}
        members = list(range(1, world_size))
        for r in members:
            exp[r].update(self.holds(f"{subgroup_phase(world_size)} ", members.index(r),
                                     len(members), members))
        return exp

    def holds(self, prefix, g, n, members):
        """What stage g of the n `members` (global ranks) holds, and its neighbours."""
        start, stop = cut(g, n, self.num_layers)
        return {f"{prefix}construct/blocks whose own parameters the stage holds":
                list(range(start, stop)),
                f"{prefix}neighbours/(is_first, is_last, prev, next)": repr((
                    g == 0, g == n - 1, members[g - 1] if g else None,
                    members[g + 1] if g < n - 1 else None))}

    def comm_rules(self, world_size):
        return [CommRule("*", "*", 0, NOT_COMMUNICATE)]


class ScheduleCheck(Check):
    """A schedule of the exercise on the whole batch, against serial training: the loss on the
    last stage, every stage's gradients (and again, added, on a second call without zero_grad),
    the order of its forwards and backwards, the activations alive at once, and the weights
    after SGD and Adam steps. Subclasses name the function and what its rules expect."""
    exercise, cpu_budget = "pipeline", 40.0
    function = "gpipe"
    num_layers = 6
    cases = (6,)                # numbers of micro-batches; the first one also steps
    steps = True
    again = True                # a second call without zero_grad: gradients added

    def members(self, world_size) -> list:
        return list(range(world_size))

    def call(self, ctx, stage, group, x, y, m):
        fn = getattr(ctx.impl.pipeline, self.function)
        return fn(stage, ctx.to(x), ctx.to(y), F.mse_loss, m, group=group)

    def run(self, ctx):
        members = self.members(ctx.world_size)
        group = ctx.group if len(members) == ctx.world_size else ctx.new_group(members)
        if ctx.rank not in members:
            return
        g, n = members.index(ctx.rank), len(members)
        start, stop = cut(g, n, self.num_layers)
        names = own_names(self.num_layers, start, stop)
        for m in self.cases:
            model = seeded(lambda: blocks(self.num_layers), 0).to(device=ctx.device,
                                                                  dtype=ctx.dtype)
            params = dict(model.named_parameters())
            trace = StageTrace(model, start, stop)
            stage = ctx.impl.pipeline.PipelineStage(model, group=group)
            x, y = batch(0)
            with ctx.phase(f"M={m}"), trace.saving():
                loss = self.call(ctx, stage, group, x, y, m)
            trace.remove()
            record_unwaited(ctx, f"M={m}", f"M={m}")
            if g == n - 1:
                ctx.record(f"M={m}/loss", loss if asked.is_tensor(loss) else None)
                ctx.record_value(f"M={m}/{DETACHED}", not asked.is_tensor(loss)   # torch's word
                                 or not asked.requires_grad(loss))
            else:
                ctx.record_value(f"M={m}/returned", repr(loss)[:40])
            for name in names:
                ctx.record(f"M={m}/grad {name}", params[name].grad)
            ctx.record_value(f"M={m}/forwards and backwards, in order", self.order(trace))
            ctx.record_value(f"M={m}/micro-batches whose activations were alive at once",
                             trace.peak)
            if self.again and m == self.cases[0]:
                with ctx.phase(f"again M={m}"):
                    self.call(ctx, stage, group, x, y, m)
                for name in names:
                    ctx.record(f"again M={m}/grad {name}", params[name].grad)
        if self.steps:
            record_steps(ctx, self.num_layers, names, group,
                         lambda stage, k: self.call(ctx, stage, group, *batch(k), self.cases[0]))

    def order(self, trace) -> str:
        return trace.letters()

    def expected_order(self, g, n, m) -> str:
        return schedule_gpipe(m)

    def alive(self, g, n, m):
        return Bound(high=m, what="the M micro-batches GPipe keeps")

    def expected(self, world_size):
        members = self.members(world_size)
        n = len(members)
        ref = serial(self.num_layers, self.steps)
        exp = {r: {} for r in range(world_size)}
        for g, r in enumerate(members):
            e = exp[r]
            names = own_names(self.num_layers, *cut(g, n, self.num_layers))
            for m in self.cases:
                wrong = mistakes(self.num_layers, m) if m > 1 else []
                # the schedule first: a micro-batch dropped or run out of order is named as
                # such, not by the values it leaves wrong
                e[f"M={m}/forwards and backwards, in order"] = self.expected_order(g, n, m)
                e[f"M={m}/micro-batches whose activations were alive at once"] = self.alive(g, n, m)
                e[f"M={m}/{NEVER_WAITED}"] = []
                if g == n - 1:
                    e[f"M={m}/loss"] = Like(ref["loss"], tuple(
                        (w[0], w[2], w[3]) if "reset" not in w[2] else (w[0], LAST_LOSS, LOSS)
                        for w in wrong))
                    e[f"M={m}/{DETACHED}"] = True
                else:
                    e[f"M={m}/returned"] = "None"
                for name in names:
                    e[f"M={m}/grad {name}"] = Like(ref["grads"][name], tuple(
                        (w[1][name], w[2], w[3]) for w in wrong))
                if self.again and m == self.cases[0]:
                    for name in names:
                        e[f"again M={m}/grad {name}"] = 2 * ref["grads"][name]
            for opt_name in OPTIMIZERS if self.steps else ():
                for k in range(1, STEPS + 1):
                    for name in names:
                        e[f"step{k} {opt_name}/{name}"] = ref[(opt_name, k)][name]
        return cast(exp, getattr(torch, self.dtype))

    def factors(self, world_size):
        m = self.cases[0]
        return [(m, "each micro-batch's loss not scaled by 1/M",
                 f"scale each micro-batch's loss by 1/M (here 1/{m}) before its backward: the "
                 "M backwards ADD their gradients"),
                (1 / m, "the loss scaled by 1/M twice (a mean of means)",
                 "loss_fn already averages over the micro-batch's rows: divide by M once")]

    def comm_rules(self, world_size):
        members = self.members(world_size)
        phases = [(f"M={m}", m) for m in self.cases]
        phases += [(f"again M={self.cases[0]}", self.cases[0])] if self.again else []
        phases += [(f"step{k} {o}", self.cases[0]) for o in (OPTIMIZERS if self.steps else ())
                   for k in range(1, STEPS + 1)]
        rules = {r: [rule for phase, m in phases
                     for rule in traffic_rules(phase, members, m, r, self.function)]
                 for r in range(world_size)}
        if len(members) < world_size:       # rule 'Group': on the group given only
            rules = {r: [CommRule(x.phase, x.kind, x.count, x.hint, x.nbytes, x.peers,
                                  members=tuple(members)) if r in members else x for x in rs]
                     for r, rs in rules.items()}
        return rules


class GPipe(ScheduleCheck):
    """gpipe with 6 micro-batches of 2 rows, then SGD and Adam steps."""
    name, function = "gpipe", "gpipe"
    hints = {"": GRADS, "deadlock": STUCK, "/loss": LOSS, "/returned": LOSS,
             NEVER_WAITED: WAIT_EVERY, DETACHED: DETACHED_LOSS, "error#none": SENT_NONE,
             "error#size": SIZE_ERROR,
             "again": ACCUMULATED, "step": STEPS_WRONG,
             "forwards and backwards": GPIPE_ORDER}


class OneFOneB(ScheduleCheck):
    """one_f_one_b with 6 micro-batches (more than the stages) and 2 (fewer, at 3 and 4 ranks:
    the warm-up is then every micro-batch), then SGD and Adam steps."""
    name, function = "one_f_one_b", "one_f_one_b"
    cases = (6, 2)
    hints = {"": GRADS, "deadlock": STUCK, "/loss": LOSS, "/returned": LOSS,
             NEVER_WAITED: WAIT_EVERY, DETACHED: DETACHED_LOSS, "error#none": SENT_NONE,
             "error#size": SIZE_ERROR,
             "again": ACCUMULATED, "step": STEPS_WRONG,
             "forwards and backwards": ORDER_1F1B, "alive at once": MEMORY_1F1B,
             "error/M=2": "rule 'Schedule': with fewer micro-batches than stages the warm-up is "
                          "w = min(N - r - 1, M): never more forwards than there are "
                          "micro-batches (M = 2 here, with up to 4 stages)"}

    def order(self, trace):
        return trace.order()

    def expected_order(self, g, n, m):
        return schedule_1f1b(g, n, m)

    def alive(self, g, n, m):
        return Bound(high=min(n - g, m), what="min(N - r, M) micro-batches (1F1B)")


class Subgroup(OneFOneB):
    """Both schedules on the group of every rank but rank 1 ({0, 2}, {0, 2, 3}): group ranks
    differ from global ones, and the neighbours' global ranks are not r - 1 and r + 1."""
    name, task = "subgroup", "E9.3"
    world_sizes = (3, 4)
    cases = (4,)
    steps = again = False
    hints = {**OneFOneB.hints, "": "rule 'Group': r and N are the GROUP rank and size; the p2p "
             "calls take GLOBAL ranks: dist.get_global_rank(group, r - 1) and (group, r + 1)",
             "wrong group": "rule 'Group': every point-to-point call of gpipe (E9.2) and "
             "one_f_one_b (E9.3) (send, recv, isend, irecv, dist.P2POp) takes group=stage.group "
             "and the peer's GLOBAL rank; a call without group= runs on the whole world"}

    def members(self, world_size):
        return others(world_size)

    def call(self, ctx, stage, group, x, y, m):
        pipe = ctx.impl.pipeline
        pipe.gpipe(stage, ctx.to(x), ctx.to(y), F.mse_loss, m, group=group)
        for p in stage.parameters():
            p.grad = None
        return pipe.one_f_one_b(stage, ctx.to(x), ctx.to(y), F.mse_loss, m, group=group)

    def order(self, trace):
        m = self.cases[0]       # one_f_one_b's events, after gpipe's, numbered from 0 again
        return " ".join(f"{e[0]}{int(e[1:]) - m}" for e in trace.events[2 * m:])

    def alive(self, g, n, m):
        return Bound(high=m, what="the M micro-batches gpipe keeps")

    def comm_rules(self, world_size):
        rules = super().comm_rules(world_size)
        return {r: [CommRule(x.phase, x.kind, 2 * x.count if isinstance(x.count, int) and
                             x.kind != "collective" and x.kind != "*" else x.count,
                             x.hint, x.nbytes, x.peers, x.members) for x in rs]
                for r, rs in rules.items()}


DP_ORDER = ("rule 'Schedule': data_parallel_pipeline runs one_f_one_b (not gpipe) on its "
            "pipeline, group=stage.group, so r and N are the stage's place in ITS pipeline "
            "(not in the world): " + ORDER_1F1B.partition(": ")[2])
DP_SHARD = ("rule 'Results': in data_parallel_pipeline d = dist.get_rank(dp_group) is the "
            "replica's rank in dp_group (not in the world) and D = dist.get_world_size(dp_group); "
            "shard the targets as the inputs, inputs.chunk(D)[d] and targets.chunk(D)[d], and run "
            "one_f_one_b on them with stage.group")
DP_LOSS = ("rule 'Results': each replica trains on its own shard, inputs.chunk(D)[d] and "
           "targets.chunk(D)[d], and its last stage returns ITS shard's loss as one_f_one_b "
           "gives it: no all-reduce of the loss (rule 'Communication': the gradients' average "
           "is the one collective)")
DP_MEMORY = ("rule 'Memory': data_parallel_pipeline's stages keep 1F1B's memory, at most "
             "min(N - r, M) micro-batches' activations, r and N in stage.group: run one_f_one_b "
             "(not gpipe) with group=stage.group")


class DataParallelPipeline(Check):
    """DP x PP: D pipelines of P stages (2 ranks: two of one stage; 3: one of three; 4: two of
    two), each replica on its own shard of the batch, the gradients averaged over each stage's
    dp group: serial training's gradients and steps on the whole batch."""
    exercise, name = "pipeline", "data_parallel_pipeline"
    cpu_budget, num_layers, m = 40.0, 6, 3
    hints = {"": DP_GRADS, "deadlock": STUCK, "/loss": "rule 'Results': the last stage of each "
             "pipeline returns ITS replica's loss (the mean over its shard of the batch), the "
             "other stages None", "/returned": LOSS, "again": ACCUMULATED, "step": STEPS_WRONG,
             "forwards and backwards": DP_ORDER, "alive at once": DP_MEMORY,
             "wrong group": "rule 'Group': data_parallel_pipeline averages each gradient on "
             "dp_group (all_reduce(p.grad, group=dp_group): the ranks holding this stage in "
             "every pipeline), never on the world or on stage.group",
             # an exception is no wrong weight: without these, the key 'step0' picks "step"
             "error": DP_SHARD, "error/step0": DP_SHARD, "error#none": SENT_NONE}

    def call(self, ctx, stage, dp, step):
        x, y = batch(step)
        return ctx.impl.pipeline.data_parallel_pipeline(stage, ctx.to(x), ctx.to(y), F.mse_loss,
                                                        self.m, dp_group=dp)

    def run(self, ctx):
        pipelines, dps = dp_pp_groups(ctx.world_size)
        made = [ctx.new_group(ranks) for ranks in pipelines + dps]    # every rank, same order
        mine = next(i for i, ranks in enumerate(pipelines) if ctx.rank in ranks)
        pp, dp = made[mine], made[len(pipelines) + ctx.rank % len(dps)]
        stage_index, p = pipelines[mine].index(ctx.rank), len(pipelines[mine])
        start, stop = cut(stage_index, p, self.num_layers)
        names = own_names(self.num_layers, start, stop)
        model = seeded(lambda: blocks(self.num_layers), 0).to(device=ctx.device, dtype=ctx.dtype)
        params = dict(model.named_parameters())
        stage = ctx.impl.pipeline.PipelineStage(model, group=pp)
        trace = StageTrace(model, start, stop)
        with ctx.phase("step0"), trace.saving():
            loss = self.call(ctx, stage, dp, 0)
        trace.remove()
        ctx.record_value("step0/forwards and backwards, in order", trace.order())
        ctx.record_value("step0/micro-batches whose activations were alive at once", trace.peak)
        if stage_index == p - 1:
            ctx.record("step0/loss", loss if isinstance(loss, torch.Tensor) else None)
        else:
            ctx.record_value("step0/returned", repr(loss)[:40])
        for name in names:
            ctx.record(f"step0/grad {name}", params[name].grad)
        with ctx.phase("again"):
            self.call(ctx, stage, dp, 0)
        for name in names:
            ctx.record(f"again/grad {name}", params[name].grad)
        record_steps(ctx, self.num_layers, names, pp, lambda stage, k: self.call(ctx, stage, dp, k))

    def expected(self, world_size):
        pipelines, dps = dp_pp_groups(world_size)
        ref = serial(self.num_layers)
        exp = {}
        for d, ranks in enumerate(pipelines):
            for s, r in enumerate(ranks):
                names = own_names(self.num_layers, *cut(s, len(ranks), self.num_layers))
                e = exp[r] = {}
                e["step0/forwards and backwards, in order"] = schedule_1f1b(s, len(ranks), self.m)
                e["step0/micro-batches whose activations were alive at once"] = Bound(
                    high=min(len(ranks) - s, self.m), what="min(N - r, M) micro-batches (1F1B)")
                if s == len(ranks) - 1:
                    e["step0/loss"] = Like(shard_loss(self.num_layers, d, len(pipelines)), ((
                        ref["loss"], "training every replica on the whole batch, or averaging the "
                        "replicas' losses over dp_group,", DP_LOSS),))
                else:
                    e["step0/returned"] = "None"
                for name in names:
                    e[f"step0/grad {name}"] = ref["grads"][name]
                    e[f"again/grad {name}"] = 2 * ref["grads"][name]
                for opt_name in OPTIMIZERS:
                    for k in range(1, STEPS + 1):
                        for name in names:
                            e[f"step{k} {opt_name}/{name}"] = ref[(opt_name, k)][name]
        return cast(exp, getattr(torch, self.dtype))

    def factors(self, world_size):
        replicas = world_size // DP_PP_STAGES[world_size]
        if replicas == 1:
            return []
        return [(replicas, "the replicas' gradients summed, not averaged",
                 "divide the all-reduced gradients by D, the size of dp_group")]

    def comm_rules(self, world_size):
        pipelines, dps = dp_pp_groups(world_size)
        rules = {}
        for ranks in pipelines:
            for s, r in enumerate(ranks):
                dp = dps[s]
                count = Bound(1 if len(dp) > 1 else 0, len(own_names(   # one per gradient at most
                    self.num_layers, *cut(s, len(ranks), self.num_layers))))
                rules[r] = []
                for phase in ["step0", "again"] + [f"step{k} {o}" for o in OPTIMIZERS
                                                    for k in range(1, STEPS + 1)]:
                    rules[r] += [x for x in traffic_rules(phase, ranks, self.m, r, "1F1B")
                                 if x.kind != "collective" and x.kind != "*"]
                    rules[r].append(CommRule(phase, "collective", count, DP_AVERAGE,
                                             members=tuple(dp)))
        return rules
