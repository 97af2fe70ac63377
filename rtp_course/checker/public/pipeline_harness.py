"""What the pipeline checks share: the batch, the serial run, the schedules and the rules of
each stage's traffic (the model of blocks and a stage's trace: models/stages.py)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from rtp_course.checker.common import make_optimizer, named_params, randn, seeded
from rtp_course.checker.registry import Bound, CommRule, Like
from rtp_course.models.stages import WIDTH, StageTrace, blocks, cut  # noqa: F401 (the checks' names)

BATCH = 12                      # rows: M = 2, 3, 4, 6
OPTIMIZERS, STEPS = ("sgd", "adam"), 2
SEND, RECV = "send|isend", "recv|irecv"


def batch(step: int, seed: int = 0) -> tuple:
    """The step's whole batch (inputs, targets), [12, 8] each, the same on every rank."""
    return randn(300 + 7 * step + seed, BATCH, WIDTH), randn(301 + 7 * step + seed, BATCH, WIDTH)


def own_names(num_layers: int, start: int, stop: int) -> list:
    """The full model's parameter names of blocks start .. stop-1 ("2.0.weight")."""
    return [n for n in named_params(blocks(num_layers)) if start <= int(n.split(".")[0]) < stop]


def schedule_1f1b(rank: int, world: int, m: int) -> str:
    """Rule 'Schedule' for one_f_one_b: F^w (F B)^(M-w) B^w, w = min(N - r - 1, M)."""
    w = min(world - rank - 1, m)
    order = [f"F{i}" for i in range(w)]
    for i in range(m - w):
        order += [f"F{w + i}", f"B{i}"]
    return " ".join(order + [f"B{i}" for i in range(m - w, m)])


def schedule_gpipe(m: int) -> str:
    """Rule 'Schedule' for gpipe: every forward before the first backward (any backward order)."""
    return "F" * m + "B" * m


def serial(num_layers: int, steps=True, seed: int = 0, data_seed: int = 0) -> dict:
    """Serial training on the whole batch: loss and gradients of step 0, weights after the
    steps of each optimizer."""
    out = {}
    model = seeded(lambda: blocks(num_layers), seed)
    x, y = batch(0, data_seed)
    loss = F.mse_loss(model(x), y)
    loss.backward()
    out["loss"] = loss.detach()
    out["grads"] = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    for name in OPTIMIZERS if steps else ():
        model = seeded(lambda: blocks(num_layers), seed)
        opt = make_optimizer(name, model.parameters())
        for k in range(1, STEPS + 1):
            opt.zero_grad()
            x, y = batch(k, data_seed)
            F.mse_loss(model(x), y).backward()
            opt.step()
            out[(name, k)] = named_params(model)
    return out


def record_steps(ctx, num_layers: int, names: list, group, step) -> None:
    """SGD and Adam, STEPS steps each, on a fresh model's stage: zero_grad, step(stage, k) (the
    schedule on step k's batch), opt.step(); records the stage's weights after each step."""
    start, stop = (int(names[0].split(".")[0]), int(names[-1].split(".")[0]) + 1)
    for opt_name in OPTIMIZERS:
        model = seeded(lambda: blocks(num_layers), 0).to(device=ctx.device, dtype=ctx.dtype)
        stage = ctx.impl.pipeline.PipelineStage(model, group=group)
        opt = make_optimizer(opt_name, model[start:stop].parameters())
        for k in range(1, STEPS + 1):
            with ctx.phase(f"step{k} {opt_name}"):
                opt.zero_grad()
                step(stage, k)
                opt.step()
            params = dict(model.named_parameters())
            for name in names:
                ctx.record(f"step{k} {opt_name}/{name}", params[name])


def mistakes(num_layers: int, m: int, seed: int = 0) -> list:
    """[(loss, {name: grad}, cause, hint)]: what two known mistakes give with m micro-batches."""
    x, y = batch(0)
    out = []
    for cause, hint, loss_of in (
            ("micro-batch i's output paired with the targets of micro-batch M-1-i",
             "rule 'Schedule': micro-batch i is rows i*b .. (i+1)*b - 1 of inputs AND of targets: "
             "the last stage pairs its i-th received activation with targets.chunk(M)[i], in the "
             "order the first stage sent them",
             lambda model: F.mse_loss(model(x), torch.cat(y.chunk(m)[::-1]))),
            ("only the last micro-batch's gradient (.grad reset before each backward)",
             ACCUMULATED.replace("the caller zeroes them", "the M micro-batches' gradients "
                                 "add up; the caller zeroes them once"),
             lambda model: F.mse_loss(model(x.chunk(m)[-1]), y.chunk(m)[-1]) / m)):
        model = seeded(lambda: blocks(num_layers), seed)
        loss = loss_of(model)
        loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        out.append((loss.detach(), grads, cause, hint))
    return out


def traffic_rules(phase: str, members: list, m: int, rank: int, schedule: str) -> list:
    """Rules 'Communication' and 'Point-to-point only' for global `rank` in a pipeline over
    the global ranks `members` with m micro-batches in `phase`."""
    if rank not in members:
        return [CommRule(phase, "*", 0, "rule 'Group': a rank outside the group takes no part")]
    g, n = members.index(rank), len(members)
    if n == 1:
        return [CommRule(phase, "*", 0, "rule 'Communication': with one stage there is no "
                                         "neighbour: nothing is sent")]
    neighbours = tuple(members[q] for q in (g - 1, g + 1) if 0 <= q < n)
    count = m * ((g > 0) + (g < n - 1))
    what = (f"stage {g} of {n} with M = {m}: "
            + " and ".join(([] if g == 0 else ["M activations from the previous stage"])
                           + ([] if g == n - 1 else ["M gradients from the next"])))
    return [CommRule(phase, "collective", 0, "rule 'Point-to-point only': activations and "
                     f"gradients travel by send/recv or batch_isend_irecv in {schedule}, "
                     "never a collective"),
            CommRule(phase, RECV, count, f"rule 'Communication': {schedule} receives, per "
                     f"micro-batch, one activation (from the previous stage) and one gradient "
                     f"(from the next): {what}", peers=neighbours),
            CommRule(phase, SEND, count, f"rule 'Communication': {schedule} sends, per "
                     f"micro-batch, its output to the next stage and its input's gradient to "
                     f"the previous one, to the neighbouring stages only (GLOBAL ranks)",
                     peers=neighbours)]


def cast(exp: dict, dtype) -> dict:
    """Expected values (and their lookalikes) in the check's dtype (serial runs in float64)."""
    def to(v):
        if isinstance(v, Like):
            return Like(to(v.value), tuple((to(t), c, h) for t, c, h in v.lookalikes))
        return v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
    return {r: {k: to(v) for k, v in e.items()} for r, e in exp.items()}


WRONG_CUT = ("rule 'Layout': stage r of N holds the model's own blocks model[start:stop] with "
             "(start, stop) = (r * L // N, (r + 1) * L // N): slice the nn.Sequential (no copies, "
             "so the caller's optimizer and the checker see the parameters)")
LOSS = ("rule 'Results': the last stage returns the sum of loss_fn(out_i, target_i) / M over the "
        "M micro-batches (the whole batch's mean loss), detached; the other stages return None")
GRADS = ("rule 'Results': after the schedule, .grad holds serial training's gradient on the "
         "whole batch: each micro-batch's loss scaled by 1/M, ONE backward per micro-batch, the "
         "M gradients ADDED by autograd (never reset .grad in between); the gradient sent back "
         "is x_i.grad of the received activation (x_i.requires_grad_() before the forward)")
ACCUMULATED = ("rule 'Results': the schedule ADDS its gradients to what .grad holds, as "
               "backward does: the caller zeroes them (never set .grad to None or zero inside)")
STEPS_WRONG = ("the gradients were right but the weights after the steps are not: run the whole "
               "schedule (every micro-batch's backward) before opt.step()")
STUCK = ("on NCCL a rank's p2p operations run in the order posted and a send waits for its "
         "receive: two neighbours that both send first, or both receive first, wait forever. "
         "Post each pair that must progress together in ONE dist.batch_isend_irecv (1F1B's "
         "steady state: send forward + receive backward, send backward + receive forward), and "
         "check every peer is the neighbouring stage (GLOBAL rank)")
GPIPE_ORDER = ("rule 'Schedule': gpipe runs all M forwards of a stage before its first backward "
               "(F = a stage forward on one micro-batch, B = the backward from its output)")
ORDER_1F1B = ("rule 'Schedule': stage r runs w = min(N - r - 1, M) warm-up forwards, then M - w "
              "times one forward and the backward of the OLDEST micro-batch kept, then the w "
              "backwards left: F^w (F B)^(M-w) B^w, micro-batches in order 0 .. M-1")
MEMORY_1F1B = ("rule 'Memory': 1F1B's stage r keeps at most min(N - r, M) micro-batches' "
               "activations (what autograd saved for their backward): a backward without "
               "retain_graph frees them, so run the oldest micro-batch's backward after each "
               "steady-state forward (retain_graph=True, or every forward before the backwards, "
               "is GPipe's memory)")


# DP x PP: the pipeline length P at each world size (D = N / P replicas): pure data parallelism
# at 2 ranks (graded there), one pipeline of 3, two pipelines of 2 at 4.
DP_PP_STAGES = {1: 1, 2: 1, 3: 3, 4: 2}


def dp_pp_groups(world: int) -> tuple:
    """(pipelines, dp groups) as lists of global ranks: pipeline d is ranks d*P .. d*P+P-1, the
    dp group of stage s ranks s, s+P, ..."""
    p = DP_PP_STAGES[world]
    pipelines = [list(range(d * p, (d + 1) * p)) for d in range(world // p)]
    return pipelines, [list(range(s, world, p)) for s in range(p)]


def shard_loss(num_layers: int, replica: int, replicas: int, seed: int = 0) -> torch.Tensor:
    """Serial loss of replica `replica`'s shard of step 0's batch."""
    model = seeded(lambda: blocks(num_layers), seed)
    x, y = batch(0)
    with torch.no_grad():
        return F.mse_loss(model(x.chunk(replicas)[replica]), y.chunk(replicas)[replica])


DP_AVERAGE = ("rule 'Communication': after its replica's 1F1B, each stage's gradients are "
              "averaged over dp_group (the ranks holding the same stage in the other "
              "pipelines): one all-reduce per gradient (or fewer, flattened), then / D")
DP_GRADS = ("rule 'Results': replica d trains on inputs.chunk(D)[d] (d its rank in dp_group), "
            "then every .grad of its stage is all-reduced on dp_group and divided by D: the "
            "mean over replicas of their shards' gradients is serial training's on the whole "
            "batch")
