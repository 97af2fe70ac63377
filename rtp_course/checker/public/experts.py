"""Public checks for E10 `experts`: all-to-all with uneven splits, the expert-parallel MoE layer
against the serial one (rtp_course/models/moe.py), and its training, alone and with data
parallelism.

Every rank feeds its own tokens (drawn from its own key) and its own upstream gradient. The
serial layer runs each rank's tokens as one routing group (capacity counts that rank's tokens,
as the expert-parallel layer does), so rank r's output, aux loss and input gradient are the
serial layer's on rank r's tokens; before sync_gradients the router's gradient is rank r's own
and expert e's gradient is the sum over every rank's tokens; after it, both are the gradient of
the mean of the ranks' losses. Routing is steered where a case needs it (all tokens to expert
0; no token for the last rank's experts) by the router's bias, the same on both sides.
"""
from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F

from rtp_course.checker.common import make_optimizer, randn, seeded
from rtp_course.checker.public.tensor_parallel_harness import raises
from rtp_course.checker.registry import Bound, Check, CommRule
from rtp_course.models.moe import MoE
from rtp_course.runtime import asked

DIM, HIDDEN, EXPERTS, TOKENS = 6, 8, 12, 16     # 12 experts split over 1, 2, 3 and 4 ranks
AUX = 0.5               # the aux loss's weight in the checks' losses: its gradient shows
STEPS = 2
OPTIMIZERS = ("sgd", "adam")
LAYOUT = ("rule 'Layout': rank r of the group (dist.get_rank(group), never the global rank) "
          "holds experts [r*E/N, (r+1)*E/N) as model.experts, in order, and a copy of the "
          "router as model.router")
SPLITS = ("the rows rank r sends to rank q are input_splits[q] (x's rows in rank order); the "
          "rows that arrive from rank q are output_splits[q], in rank order")

BACKWARD_SPLITS = ("backward is the REVERSE all-to-all: the gradient rows go back where their "
                   "forward rows came from, so its input splits are the forward's output_splits "
                   "and its output splits the forward's input_splits, kept on ctx per call (not "
                   "on the class or module: a second call before the first's backward would "
                   "overwrite them)")


def _rows(seed, r, q, w):
    """How many rows rank r sends to rank q in all-to-all call `seed`: uneven, some zero, and
    the last rank receives nothing in the first call (w > 1)."""
    if seed == 0 and w > 1 and q == w - 1:
        return 0
    return (3 * r + 2 * q + seed) % 4


def splits_matrix(seed, w):
    return [[_rows(seed, r, q, w) for q in range(w)] for r in range(w)]


# ---- E10.1 ------------------------------------------------------------------------------


class AllToAllCheck(Check):
    """Two calls with other splits (the second's are not the first's transposed), then both
    backwards: split sizes kept on the class, or the forward's splits used backward, show."""
    exercise, name = "experts", "AllToAll"
    WIDTH = 5
    hints = {
        "forward/output": "forward: " + SPLITS + "; output has sum(output_splits) rows",
        "backward/grad input": BACKWARD_SPLITS,
        "forward/input after": "rule 'New tensors': forward changed its input",
        "backward/upstream grad after": "rule 'New tensors': backward changed grad_output",
        "error/forward": "NCCL's all-to-all takes contiguous tensors (rule 'Contiguity': send "
                         "x.contiguous(); the second call's x is a transposed view), an output "
                         "of sum(output_splits) rows made like x, and splits that agree across "
                         "ranks: " + SPLITS,
        "error/backward": "NCCL's all-to-all takes contiguous tensors (rule 'Contiguity': send "
                          "grad_output.contiguous(); the second call's gradient is a transposed "
                          "view, as one from a transpose upstream is). Otherwise: "
                          + BACKWARD_SPLITS,
        "forward/output after": "rule 'New tensors': an earlier output changed when the "
                                "function was called again: return a fresh tensor each call",
    }

    def data(self, call, r, w, owner=None):
        """Group rank r's splits, input and upstream gradient, drawn from the key of global
        rank `owner` (r itself on the world)."""
        owner = r if owner is None else owner
        S = splits_matrix(call, w)
        x = randn(10 + call, sum(S[r]), self.WIDTH, owner=owner)
        g = randn(20 + call, sum(S[q][r] for q in range(w)), self.WIDTH, owner=owner)
        return S, x, g

    def run(self, ctx):
        self.exchange(ctx, ctx.group, ctx.rank, ctx.world_size)

    def exchange(self, ctx, group, r, w):
        """Both calls and their backwards on `group`, this rank its r-th of w."""
        mod = ctx.impl.experts
        outs = []
        for call in (0, 1):
            S, x, _ = self.data(call, r, w, ctx.rank)
            x = ctx.to(x)
            if call == 1:       # a transposed view, as activations arrive (rule 'Contiguity')
                x = x.t().contiguous().t()
            x = x.clone().requires_grad_(True)      # clone keeps the strides
            send, recv = S[r], [S[q][r] for q in range(w)]
            with ctx.phase("forward"):
                y = mod.all_to_all(x, send, recv, group=group)
            ctx.record(f"forward/output (call {call}: splits in {send}, out {recv})", y)
            ctx.record(f"forward/input after (call {call})", x)
            outs.append((call, x, y, send, recv))
        ctx.record("forward/output after the second call (call 0)", outs[0][2])
        for call, x, y, send, recv in outs:
            _, _, g = self.data(call, r, w, ctx.rank)
            g = ctx.to(g)
            if call == 1:       # a transposed view, as a gradient from a transpose arrives
                g = g.t().contiguous().t()
            keep = g.clone()
            if not isinstance(y, torch.Tensor) or tuple(y.shape) != tuple(g.shape):
                continue
            with ctx.phase("backward"):
                y.backward(g)
            ctx.record(f"backward/grad input (call {call}: splits in {send}, out {recv})", x.grad)
            ctx.record(f"backward/upstream grad after (call {call})", g)
            ctx.record(f"backward/upstream grad copy (call {call})", keep)

    def expected(self, w, owners=None):
        """{group rank: records}; owners[q]: the global rank whose key draws q's data."""
        owners = owners or list(range(w))
        exp = {}
        for r in range(w):
            e = {}
            for call in (0, 1):
                S, x, _ = self.data(call, r, w, owners[r])
                send, recv = S[r], [S[q][r] for q in range(w)]
                # what arrives: rank q's rows for r, in rank order
                parts = []
                for q in range(w):
                    Sq, xq, _ = self.data(call, q, w, owners[q])
                    start = sum(Sq[q][:r])
                    parts.append(xq[start:start + Sq[q][r]])
                y = torch.cat(parts)
                e[f"forward/output (call {call}: splits in {send}, out {recv})"] = y
                e[f"forward/input after (call {call})"] = x
                if call == 0:
                    e["forward/output after the second call (call 0)"] = y
                grads = []
                for q in range(w):
                    _, _, gq = self.data(call, q, w, owners[q])
                    recv_q = [S[p][q] for p in range(w)]
                    start = sum(recv_q[:r])
                    grads.append(gq[start:start + S[r][q]])
                e[f"backward/grad input (call {call}: splits in {send}, out {recv})"] = \
                    torch.cat(grads)
                e[f"backward/upstream grad after (call {call})"] = \
                    self.data(call, r, w, owners[r])[2]
            exp[r] = e
        return exp

    def comm_rules(self, w):
        if w == 1:
            return []
        return [CommRule("forward", "all_to_all", 2, "AllToAll's forward is one all-to-all "
                         "per call, also on a rank that sends or receives nothing"),
                CommRule("forward", "*", 2, "AllToAll's forward is one all-to-all and nothing "
                         "else"),
                CommRule("backward", "all_to_all", 2, "AllToAll's backward is one all-to-all "
                         "(the reverse one) per call"),
                CommRule("backward", "*", 2, "AllToAll's backward is one all-to-all and "
                         "nothing else")]


class ExchangeSplitsCheck(Check):
    """Each rank's counts [N, 3]: what it sends to rank q for q's local item i."""
    exercise, name = "experts", "exchange_splits"
    hints = {
        "forward/received": "received[q, i] is what rank q's counts say for THIS rank: "
                            "counts_q[r, i]; one all-to-all of the int64 counts with equal "
                            "splits (one row per rank) does it",
        "forward/counts after": "rule 'New tensors': exchange_splits changed the caller's counts",
        "forward/dtype": "rule 'Dtypes': the received counts keep the counts' dtype (int64)",
    }

    @staticmethod
    def counts(r, w):
        return torch.tensor([[(5 * r + 3 * q + 2 * i) % 7 for i in range(3)] for q in range(w)])

    def run(self, ctx):
        self.exchange(ctx, ctx.group, ctx.rank, ctx.world_size)

    def exchange(self, ctx, group, r, w):
        """One exchange on `group`, this rank its r-th of w."""
        counts = self.counts(r, w).to(ctx.device)
        with ctx.phase("forward"):
            got = ctx.impl.experts.exchange_splits(counts, group=group)
        ctx.record("forward/received counts", got)
        ctx.record_value("forward/dtype of the received counts", str(getattr(got, "dtype", None)))
        ctx.record("forward/counts after", counts)

    def expected(self, w, owners=None):
        return {r: {"forward/received counts": torch.stack([self.counts(q, w)[r] for q in range(w)]),
                    "forward/dtype of the received counts": "torch.int64",
                    "forward/counts after": self.counts(r, w)} for r in range(w)}

    def comm_rules(self, w):
        if w == 1:
            return []
        return [CommRule("forward", "all_to_all", 1, "exchange_splits is one all-to-all of the "
                         "counts"),
                CommRule("forward", "*", 1, "exchange_splits is one all-to-all and nothing else")]


class _OnSubgroups:
    """A check of E10.1 or E10.2 run on groups that are not the world: {0} and {1} of 2
    ranks, {0, 2} and {1, 3} of 4. Each group's ranks expect what the check expects of a world
    of the group's size; every collective must run on the rank's own group."""
    world_sizes = (2, 4)

    @staticmethod
    def members(w):
        return [[0], [1]] if w == 2 else [[0, 2], [1, 3]]

    def run(self, ctx):
        made = [(m, ctx.new_group(m)) for m in self.members(ctx.world_size)]
        m, group = next((m, g) for m, g in made if ctx.rank in m)
        self.exchange(ctx, group, m.index(ctx.rank), len(m))

    def expected(self, w):
        out = {}
        for m in self.members(w):
            exp = super().expected(len(m), owners=m)
            out.update({r: exp[i] for i, r in enumerate(m)})
        return out

    def comm_rules(self, w):
        rules = {}
        for m in self.members(w):
            own = super().comm_rules(len(m)) or [CommRule(
                "*", "*", Bound(high=self.calls), "rule 'Communication': the calls the "
                "docstring lists and no more (on a group of one rank they may be skipped)")]
            for r in m:   # rule 'Group': on the rank's own group only
                rules[r] = [CommRule(x.phase, x.kind, x.count, GROUP + ". " + x.hint, x.nbytes,
                                     x.peers, members=tuple(m)) for x in own]
        return rules


GROUP = ("rule 'Group': the group here is not the world ({0} and {1} of 2 ranks, {0, 2} and "
         "{1, 3} of 4): pass group=group to every collective (and keep it on ctx for the "
         "backward's), take r and N from it (dist.get_rank(group), dist.get_world_size(group)); "
         "its ranks need not be consecutive")


class AllToAllSubgroups(_OnSubgroups, AllToAllCheck):
    """AllToAll on groups that are not the world, forward and backward."""
    name, calls = "AllToAll_subgroups", 4
    hints = {k: GROUP + ". Otherwise: " + v for k, v in AllToAllCheck.hints.items()}


class ExchangeSplitsSubgroups(_OnSubgroups, ExchangeSplitsCheck):
    """exchange_splits on groups that are not the world."""
    name, calls = "exchange_splits_subgroups", 1
    hints = {k: GROUP + ". Otherwise: " + v for k, v in ExchangeSplitsCheck.hints.items()}
    hints["error/forward"] = GROUP


# ---- E10.2 ------------------------------------------------------------------------------


def build_moe(case, w, dtype=torch.float64):
    """The serial layer of `case` (shared weights: seed only), its router steered."""
    moe = seeded(lambda: MoE(DIM, HIDDEN, EXPERTS, case.top_k, case.capacity_factor),
                 case.seed, dtype)
    with torch.no_grad():
        if case.steer == "one expert":          # every token's first choice: expert 0
            moe.router.bias[0] += 30.0
        elif case.steer == "idle last rank" and w > 1:    # the last rank's experts: never
            moe.router.bias[EXPERTS - EXPERTS // w:] -= 30.0
    return moe


def tokens(case, r):
    if r == case.empty_rank:
        return 0
    return TOKENS - 2 * (r % 2) if case.uneven_tokens else TOKENS


def batch(case, r, step=0):
    """Rank r's tokens and upstream gradient (its own key)."""
    T = tokens(case, r)
    x, g = (randn(40 + 5 * step + case.seed, T, DIM, owner=r),
            randn(60 + 5 * step + case.seed, T, DIM, owner=r))
    if case.batched:        # [..., T / prod(batched), d]: the layer flattens the leading dims
        shape = (*case.batched, T // math.prod(case.batched), DIM)
        return x.view(shape), g.view(shape)
    return x, g


def expert_names(moe_expert):
    return [n for n, _ in moe_expert.named_parameters()]


def local_experts(w, r):
    m = EXPERTS // w
    return range(r * m, (r + 1) * m)


def loss_of(y, aux, g):
    """A rank without tokens has no aux loss (the serial one is 0/0 there): its loss is its
    output's, still through the all-to-alls, so its backward makes the reverse ones."""
    return (y * g).sum() + (AUX * aux if y.numel() else 0)


class _Case:
    seed, top_k, capacity_factor, steer, uneven_tokens = 1, 1, 1.25, "", False
    batched = ()            # leading dims of x [..., d] before the tokens' own
    empty_rank = None       # the rank (of the world) with no token at all


def record_params(ctx, prefix, model, w, r, what="value"):
    """Router and local experts' tensors, named by the GLOBAL expert the layout gives rank r."""
    get = (lambda p: p.grad) if what == "grad" else (lambda p: p)
    for n, p in model.router.named_parameters():
        ctx.record(f"{prefix}router.{n}", get(p))
    for i, e in enumerate(local_experts(w, r)):
        if i >= len(model.experts):
            ctx.record_value(f"{prefix}expert {e} (local {i})", "missing")
            continue
        for n, p in model.experts[i].named_parameters():
            ctx.record(f"{prefix}expert {e} (local {i}) {n}", get(p))


def expected_params(prefix, moe, w, r, what="value"):
    get = (lambda p: p.grad) if what == "grad" else (lambda p: p)
    out = {f"{prefix}router.{n}": get(p).detach().clone()
           for n, p in moe.router.named_parameters()}
    for i, e in enumerate(local_experts(w, r)):
        for n, p in moe.experts[e].named_parameters():
            out[f"{prefix}expert {e} (local {i}) {n}"] = get(p).detach().clone()
    return out


class ExpertParallelMoECheck(Check):
    """One forward and backward of the expert-parallel layer, against the serial one."""
    exercise, name = "experts", "ExpertParallelMoE"
    case = _Case()
    hints = {
        "init/": LAYOUT,
        "forward/output": "rank r's output is the serial layer's on rank r's tokens: route "
                          "(serial.route, capacity from THIS rank's token count), send each kept "
                          "choice's token to the rank of its expert (expert e lives on group "
                          "rank e // (E/N)), with the split sizes exchanged first "
                          "(exchange_splits) so each rank knows how many rows come from each "
                          "rank for each of its experts; run them; send the results back with "
                          "the splits swapped; add gate * result at the token's row "
                          "(a dropped choice adds nothing)",
        "forward/aux loss": "the aux loss is the serial layer's on this rank's tokens "
                            "(serial.load_balancing_loss(probs, routing.expert)): no "
                            "communication, no averaging over ranks",
        "forward/input after": "rule 'New tensors': forward changed the caller's tokens",
        "backward/grad input": "the input gradient flows through the gate, the combine and "
                               "dispatch all-to-alls (their backward is the reverse "
                               "all-to-all) and the router",
        "backward/router": "before sync_gradients, the router's gradient is this rank's own "
                           "(its tokens' routing and its aux loss): nothing is averaged in "
                           "forward or backward",
        "backward/expert": "expert e's gradient is the sum over EVERY rank's tokens routed to e "
                           "(the combine's backward brings each rank's output gradient back to "
                           "the expert's rank); an expert that got no token has a zero "
                           "gradient, not None (call it on its empty batch, as the serial "
                           "layer does)",
        "error/forward": "the split sizes of each all-to-all must agree across ranks: rank q's "
                         "output_splits[p] is rank p's input_splits[q] (" + SPLITS + ")",
        "error/backward": "the backward all-to-alls are AllToAll.backward's (fix E10.1's check "
                          "first): " + BACKWARD_SPLITS,
        "deadlock": "every rank must make the same all-to-all calls, in the same order, also a "
                    "rank that sends or receives no row",
    }

    def run(self, ctx):
        E, r, w = ctx.impl.experts, ctx.rank, ctx.world_size
        moe = build_moe(self.case, w, ctx.dtype).to(ctx.device)
        with ctx.phase("init"):
            model = E.ExpertParallelMoE(moe, group=ctx.group)
        record_params(ctx, "init/", model, w, r)
        x, g = batch(self.case, r)
        x, g = ctx.to(x).requires_grad_(True), ctx.to(g)
        with ctx.phase("forward"):
            y, aux = model(x)
        ctx.record("forward/output", y)
        if x.numel():
            ctx.record("forward/aux loss", aux)
        ctx.record("forward/input after", x)
        with ctx.phase("backward"):
            loss_of(y, aux, g).backward()
        ctx.record("backward/grad input", x.grad)
        record_params(ctx, "backward/", model, w, r, "grad")

    def expected(self, w):
        moe = build_moe(self.case, w)
        init = [expected_params("init/", moe, w, r) for r in range(w)]
        exp = {}
        for r in range(w):
            moe.router.zero_grad()
            x, g = batch(self.case, r)
            x.requires_grad_(True)
            y, aux = moe(x)
            loss_of(y, aux, g).backward()
            exp[r] = dict(init[r], **{"forward/output": y.detach(), "forward/aux loss": aux.detach(),
                                      "forward/input after": x.detach(),
                                      "backward/grad input": x.grad})
            if not x.numel():
                del exp[r]["forward/aux loss"]
            exp[r].update({k: v for k, v in expected_params("backward/", moe, w, r, "grad").items()
                           if "router" in k})
        for r in range(w):      # the experts' gradients: the sum over every rank's tokens
            exp[r].update({k: v for k, v in expected_params("backward/", moe, w, r, "grad").items()
                           if "router" not in k})
        return exp

    def comm_rules(self, w):
        if w == 1:
            return []
        return [CommRule("forward", "all_to_all", Bound(high=3), "rule 'Communication': "
                         "forward makes at most 3 all-to-alls (the split sizes, the dispatch, "
                         "the combine)"),
                CommRule("forward", "!all_to_all", 0, "rule 'Communication': forward makes "
                         "all-to-alls only (the split sizes, the dispatch, the combine)"),
                CommRule("backward", "all_to_all", Bound(high=2), "rule 'Communication': "
                         "backward makes at most 2 all-to-alls (the reverse of the combine, "
                         "then of the dispatch)"),
                CommRule("backward", "!all_to_all", 0, "rule 'Communication': backward "
                         "makes all-to-alls only"),
                CommRule("init", "*", 0, "rule 'Communication': building the layer needs no "
                         "communication (every rank has the serial layer)")]


class _Top2(_Case):
    seed, top_k, capacity_factor, uneven_tokens = 2, 2, 0.5, True


class _OneExpert(_Case):
    seed, capacity_factor, steer = 3, None, "one expert"


class _IdleRank(_Case):
    seed, top_k, steer = 4, 2, "idle last rank"


class ExpertParallelMoETop2Overflow(ExpertParallelMoECheck):
    """k = 2, capacity factor 0.5 (many choices dropped), ranks with 16 and 14 tokens."""
    name, case = "ExpertParallelMoE_top2_overflow", _Top2()


class ExpertParallelMoEOneExpert(ExpertParallelMoECheck):
    """No capacity limit, every token to expert 0: the other ranks receive nothing."""
    name, case = "ExpertParallelMoE_all_to_one_expert", _OneExpert()


class ExpertParallelMoEIdleRank(ExpertParallelMoECheck):
    """No token chooses the last rank's experts: it receives no row and sends its own away."""
    name, case, world_sizes = "ExpertParallelMoE_idle_last_rank", _IdleRank(), (2, 3, 4)


class _Batched(_Case):
    seed, top_k, batched = 5, 2, (2,)


BATCHED = ("x has leading batch dims here (e.g. [2, 8, d], not [T, d]): forward takes "
           "x [..., d], so flatten them to tokens first (x.reshape(-1, d)), route and "
           "exchange those rows, and give y back x's shape (y.reshape(x.shape))")


class ExpertParallelMoEBatched(ExpertParallelMoECheck):
    """x [2, T/2, d]: the layer flattens the leading dims to tokens and gives y that shape."""
    name, case = "ExpertParallelMoE_batched", _Batched()
    hints = {**ExpertParallelMoECheck.hints,
             "forward/output": BATCHED + ". Otherwise: "
                               + ExpertParallelMoECheck.hints["forward/output"],
             "error/forward": BATCHED + ". Otherwise: "
                              + ExpertParallelMoECheck.hints["error/forward"]}


class _EmptyRank(_Case):
    seed, top_k, empty_rank = 6, 2, 1


EMPTY = ("rank 1 has no token here (x is [0, d]): its ExpertParallelMoE.forward still makes "
         "every all-to-all (the split sizes, the dispatch, the combine) with zero rows to send "
         "and its peers' rows to receive "
         "and run, and its output [0, d] comes out of the combine, so its backward makes the "
         "reverse all-to-alls too; a rank that returns early leaves its peers waiting")


class ExpertParallelMoEEmptyRank(ExpertParallelMoECheck):
    """Rank 1 has no token: it sends no row, yet receives rows for its experts."""
    name, case, world_sizes = "ExpertParallelMoE_rank_without_tokens", _EmptyRank(), (2, 3, 4)
    hints = {**ExpertParallelMoECheck.hints,
             **{k: EMPTY + ". Otherwise: " + ExpertParallelMoECheck.hints[k]
                for k in ("forward/output", "backward/expert", "error/forward", "deadlock")},
             "error/backward": EMPTY}


class ExpertParallelMoENotDivisible(Check):
    """10 experts over 3 or 4 ranks: ExpertParallelMoE raises ValueError before anything else."""
    exercise, name, world_sizes = "experts", "ExpertParallelMoE_experts_not_divisible", (3, 4)
    isolated = True
    KEY = "init/ExpertParallelMoE of 10 experts over this group raises"
    hints = {KEY: "rule 'Raises': N must divide the number of experts; otherwise "
                  "ExpertParallelMoE.__init__ raises ValueError naming both numbers, e.g. "
                  "f\"{N} ranks do not divide {E} experts\" (10 experts over 3 ranks would "
                  "leave expert 9 on no rank, or give ranks different shares)"}

    @staticmethod
    def said(kind: str, message: str, w: int) -> str:
        """What ExpertParallelMoE raised, as the rule words it: the type, and whether its
        message names both numbers (the 10 experts and the group's size)."""
        if kind != "ValueError":
            return kind
        missing = [str(n) for n in (10, w) if not re.search(rf"(?<!\d){n}(?!\d)", message)]
        if missing:
            return f"ValueError({message!r}), which does not name {' and '.join(missing)}"
        return f"ValueError naming 10 and {w}"

    def run(self, ctx):
        moe = seeded(lambda: MoE(DIM, HIDDEN, 10), 9, ctx.dtype).to(ctx.device)
        with ctx.phase("init"):
            kind, message = raises(lambda: ctx.impl.experts.ExpertParallelMoE(moe,
                                                                              group=ctx.group))
        ctx.record_value(self.KEY, self.said(kind, message, ctx.world_size))

    def expected(self, w):
        return {r: {self.KEY: f"ValueError naming 10 and {w}"} for r in range(w)}

    def comm_rules(self, w):
        return [CommRule("init", "*", 0, "rule 'Communication': building the layer needs no "
                         "communication")]


# ---- E10.3 ------------------------------------------------------------------------------


def layout_ep_dp(rank, world, ep):
    """rank = dp_rank * ep + ep_rank: EP groups of consecutive ranks, DP groups across."""
    return rank % ep, rank // ep


def serial_grads(case, owners, moe, step=0):
    """Gradients of the mean over the ranks `owners` of each one's loss, each rank's tokens one
    routing group."""
    moe.zero_grad()
    total = 0
    for q in owners:
        x, g = batch(case, q, step)
        y, aux = moe(x)
        total = total + loss_of(y, aux, g) / len(owners)
    total.backward()


class SyncGradientsCheck(Check):
    """Forward, backward, then sync_gradients (no data parallelism: dp_group None)."""
    exercise, name = "experts", "sync_gradients"
    case = _Top2()
    hints = {
        "sync/router": "after sync_gradients the router's gradient is the MEAN over the ranks: "
                       "all-reduce (sum) over model.group (and over dp_group when given), then "
                       "divide by the number of ranks",
        "sync/expert": "expert e's gradient already sums every rank's tokens (the all-to-alls "
                       "brought them): divide by the number of ranks and all-reduce it over "
                       "dp_group only (its replicas), never over model.group, whose ranks hold "
                       "OTHER experts",
    }

    def run(self, ctx):
        self.sync(ctx, ctx.group, ctx.rank, ctx.world_size)

    def sync(self, ctx, group, r, w):
        """The layer on `group` (this rank its r-th of w); the tokens are this rank's own."""
        E = ctx.impl.experts
        with ctx.phase("init"):
            model = E.ExpertParallelMoE(build_moe(self.case, w, ctx.dtype).to(ctx.device),
                                        group=group)
        record_params(ctx, "init/", model, w, r)
        x, g = (ctx.to(t) for t in batch(self.case, ctx.rank))
        with ctx.phase("forward"):
            y, aux = model(x)
        with ctx.phase("backward"):
            loss_of(y, aux, g).backward()
        with ctx.phase("sync_gradients"):
            E.sync_gradients(model)
        record_params(ctx, "sync/", model, w, r, "grad")

    def expected_group(self, owners):
        w = len(owners)
        moe = build_moe(self.case, w)
        init = [expected_params("init/", moe, w, r) for r in range(w)]
        serial_grads(self.case, owners, moe)
        return [dict(init[r], **expected_params("sync/", moe, w, r, "grad")) for r in range(w)]

    def expected(self, w):
        return dict(enumerate(self.expected_group(list(range(w)))))

    def comm_rules(self, w):
        if w == 1:
            return []
        return [CommRule("sync_gradients", "all_reduce", Bound(high=2), "rule 'Communication': "
                         "sync_gradients makes at most one all-reduce per router parameter on "
                         "model.group (fewer with a flat buffer), and none for the experts "
                         "without data parallelism"),
                CommRule("sync_gradients", "*", Bound(high=2), "rule 'Communication': "
                         "sync_gradients makes all-reduces of the router's gradients only")]


SUBGROUP = ("rule 'Group': the layer's group here is {0, 2} or {1, 3}: use model.group for "
            "every collective, its rank and its size (dist.get_rank(group), "
            "dist.get_world_size(group)), never the world's; its ranks need not be consecutive")


class SyncGradientsSubgroups(SyncGradientsCheck):
    """Two layers at once on the non-consecutive groups {0, 2} and {1, 3}: each group's ranks
    average over their own group only (its size, not the world's)."""
    name, world_sizes = "sync_gradients_subgroups", (4,)
    hints = {"init/": SUBGROUP + ". " + LAYOUT,
             **{k: SUBGROUP + ". Otherwise: " + v for k, v in SyncGradientsCheck.hints.items()}}

    def run(self, ctx):
        groups = [ctx.new_group([0, 2]), ctx.new_group([1, 3])]
        self.sync(ctx, groups[ctx.rank % 2], ctx.rank // 2, 2)

    def expected(self, w):
        pairs = [self.expected_group([0, 2]), self.expected_group([1, 3])]
        return {r: pairs[r % 2][r // 2] for r in range(4)}

    def comm_rules(self, w):
        return super().comm_rules(2)


DETACHED = "detached (no autograd graph)"


def detached(loss) -> str:
    """What train_step's returned loss holds of the step's graph."""
    if asked.is_tensor(loss) and (asked.requires_grad(loss) or asked.grad_fn(loss) is not None):
        return "a tensor that requires grad (it keeps the step's autograd graph)"
    return DETACHED


class TrainStepCheck(Check):
    """Two SGD and two Adam steps of train_step on mse + AUX_TRAIN * aux, against serial
    training on the mean of the ranks' losses."""
    exercise, name = "experts", "train_step"
    case = _Case()
    ep_of = staticmethod(lambda w: w)          # pure expert parallelism
    optimizers = OPTIMIZERS
    AUX_TRAIN = 0.1
    hints = {
        "step": "train_step: optimizer.zero_grad(); y, aux = model(inputs); loss = "
                "loss_fn(y, targets) + aux_weight * aux; loss.backward(); "
                "sync_gradients(model, dp_group); optimizer.step(); return loss.detach()",
        "/loss": "train_step returns this rank's loss (loss_fn plus aux_weight * aux), detached",
        "/loss returned": "rule 'Results' (train_step's docstring: 'returns this rank's loss "
                          "(detached)'): return loss.detach(); the loss itself holds the step's "
                          "whole graph (activations, the all-to-alls' buffers) alive as long as "
                          "the caller keeps it, e.g. in a list of losses",
        "router": "the router is replicated on every rank: its gradient is the mean over ALL "
                  "ranks (model.group, then dp_group)",
        "expert": "expert e's gradient: the sum its all-to-alls brought (its EP group's tokens), "
                  "all-reduced over dp_group (its replicas only), divided by the number of ranks",
    }

    def groups(self, ctx):
        ep = self.ep_of(ctx.world_size)
        if ep == ctx.world_size:
            return ctx.group, None
        w = ctx.world_size
        eps = [ctx.new_group(list(range(d * ep, (d + 1) * ep))) for d in range(w // ep)]
        dps = [ctx.new_group(list(range(t, w, ep))) for t in range(ep)]
        t, d = layout_ep_dp(ctx.rank, w, ep)
        return eps[d], dps[t]

    def run(self, ctx):
        E, r, w = ctx.impl.experts, ctx.rank, ctx.world_size
        ep = self.ep_of(w)
        ep_group, dp_group = self.groups(ctx)
        t, _ = layout_ep_dp(r, w, ep)
        for opt_name in self.optimizers:
            model = E.ExpertParallelMoE(build_moe(self.case, w, ctx.dtype).to(ctx.device),
                                        group=ep_group)
            opt = make_optimizer(opt_name, model.parameters())
            for k in range(1, STEPS + 1):
                x, y = (ctx.to(v) for v in batch(self.case, r, k))
                with ctx.phase(f"step {k} ({opt_name})"):
                    loss = E.train_step(model, opt, F.mse_loss, x, y, dp_group=dp_group,
                                        aux_weight=self.AUX_TRAIN)
                ctx.record(f"{opt_name} step {k}/loss", loss)
                ctx.record_value(f"{opt_name} step {k}/loss returned", detached(loss))
                record_params(ctx, f"{opt_name} step {k}/", model, ep, t)

    def expected(self, w):
        ep = self.ep_of(w)
        exp = {r: {} for r in range(w)}
        for opt_name in self.optimizers:
            moe = build_moe(self.case, w)
            opt = make_optimizer(opt_name, moe.parameters())
            for k in range(1, STEPS + 1):
                opt.zero_grad()
                total = 0
                for q in range(w):
                    x, y = batch(self.case, q, k)
                    out, aux = moe(x)
                    loss = F.mse_loss(out, y) + self.AUX_TRAIN * aux
                    exp[q][f"{opt_name} step {k}/loss"] = loss.detach()
                    exp[q][f"{opt_name} step {k}/loss returned"] = DETACHED
                    total = total + loss / w
                total.backward()
                opt.step()
                for q in range(w):
                    t, _ = layout_ep_dp(q, w, ep)
                    exp[q].update(expected_params(f"{opt_name} step {k}/", moe, ep, t))
        return exp


class TrainStepEPxDP(TrainStepCheck):
    """EP over ranks [d*N, (d+1)*N), DP over ranks [t, t+N, ...] (N = W/2): W=2 is pure data
    parallelism of the whole layer, W=4 two EP groups of 2."""
    name, world_sizes = "train_step_ep_dp", (2, 4)
    ep_of = staticmethod(lambda w: w // 2)
