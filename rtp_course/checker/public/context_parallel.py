"""Public checks for E8 `context_parallel`: ring attention against serial attention.

Each rank holds its own q, k and v (drawn from its own key: another rank has them only by
communication). The parent assembles the whole sequence in the documented layout
(contiguous for causal=False, zig-zag for causal=True) and runs
F.scaled_dot_product_attention on it: each rank must see its own rows of the output and of
the gradients, and an attention layer built on ring_attention must train as the serial one.

Structure is measured, not assumed: the communication per phase (no collective; in forward
every other rank's k and v once, from a ring neighbour; in backward at most N-1 block and N
accumulator rotations); the overlap (commlog's trace with the compute ops of harness.Marks:
in forward every receive is followed by some compute before its wait; in backward every
receive whose buffer then enters a product, a k/v block, harness.BlockMarks); the received
buffers alive at the peak and after each pass (commlog); the zig-zag layout and its balance;
the caller's q, k and v as they were after each pass (rule 'New tensors'). The blocks' head_dim
is 5: sqrt(5) and 5 are no world size (1 to 4) and no length (3 and 4 tokens a rank), so a
1/sqrt(head_dim) left out is named as such (RingCheck.factors), not as a sum over the ranks.
"""
from __future__ import annotations

import contextlib

import torch

from rtp_course.checker.common import randn, seeded
from rtp_course.checker.public.context_parallel_harness import (
    BLOCK_HINTS, CAUSAL, EMPTY_MERGE, EMPTY_ROW, EXERCISE, FORWARD_KEPT, GATHER, GROUP, HINTS,
    LARGE, MERGE_HINTS, NO_MAX, ONLY_COMPUTES, WRITTEN, ZIGZAG_HINTS, BlockMarks, Marks,
    RingCheck, assemble, backward_lookalikes, backward_rules, block_bytes, block_cases, blocks,
    blocks_overlapped, forward_lookalikes, forward_rules, held_bounds, inputs_as_given,
    kept_bound, merge_cases, naive_merge, naive_ring, nan_rows, pair, partial, record_held,
    required_first, ring_forward, rows, scale_factors, serial_attention, upstream, written,
    zigzag_positions)
from rtp_course.checker.public.context_parallel_layer import AttentionLayer, Optimizer
from rtp_course.checker.public.flyweight_harness import overlapped
from rtp_course.checker.public.tensor_parallel_harness import raises
from rtp_course.checker.registry import Bound, Check, CommRule, Like
from rtp_course.runtime import commlog
from rtp_course.training import memory

BLOCKS_OVERLAP = "compute while each k/v block is in flight"
KEPT = "step1 forward again/first call's attention output unchanged"   # a buffer kept
STEPPED = ("outputs and input gradients were right but the weights after the optimizer step are "
           "not: the gradients of q, k and v (all three feed the weights) must be right on "
           "every rank")


# ---------------------------------------------------------------- E8.1: one block at a time
class BlockAttention(Check):
    """block_attention alone (one rank): plain, with a mask whose last row sees no key (out 0,
    lse -inf), and with scores in the thousands (exp() of them overflows)."""
    exercise, name, task, world_sizes = EXERCISE, "block_attention", "E8.1", (1,)
    cpu_budget = 20.0
    hints = BLOCK_HINTS

    def run(self, ctx):
        cp = ctx.impl.context_parallel
        for case, (q, k, v, mask) in block_cases().items():
            with ctx.phase(case):
                out, lse = pair(cp.block_attention(ctx.to(q), ctx.to(k), ctx.to(v), None if
                                                   mask is None else mask.to(ctx.device)))
            ctx.record(f"{case}/out", out)
            ctx.record(f"{case}/lse", lse)

    def expected(self, world_size):
        exp = {}
        for case, (q, k, v, mask) in block_cases().items():
            out, lse = partial(q, k, v, mask)
            if mask is not None:    # NaN on the row that sees nothing: a known mistake, named
                out = Like(out, ((nan_rows(out, ~mask.any(-1)), EMPTY_ROW, self.hints[case]),))
            exp.update({f"{case}/out": out, f"{case}/lse": lse})
        return {0: exp}

    def comm_rules(self, world_size):
        return [CommRule(c, "*", 0, ONLY_COMPUTES.format("block_attention"))
                for c in block_cases()]


class MergeBlocks(Check):
    """merge_blocks alone (one rank): two blocks' (out, lse) must merge into the attention over
    the keys of both; with scores in the thousands; with rows that saw no key of one block, or
    of either."""
    exercise, name, task, world_sizes = EXERCISE, "merge_blocks", "E8.1", (1,)
    cpu_budget = 20.0
    hints = MERGE_HINTS

    @staticmethod
    def inputs(case):
        q, k, v, mask, split = merge_cases()[case]
        ma, mb = (None, None) if mask is None else (mask[:, :split], mask[:, split:])
        return (*partial(q, k[..., :split, :], v[..., :split, :], ma),
                *partial(q, k[..., split:, :], v[..., split:, :], mb))

    def run(self, ctx):
        cp = ctx.impl.context_parallel
        for case in merge_cases():
            args = [ctx.to(t) for t in self.inputs(case)]
            with ctx.phase(case):
                out, lse = pair(cp.merge_blocks(*args))
            ctx.record(f"{case}/out", out)
            ctx.record(f"{case}/lse", lse)

    def expected(self, world_size):
        exp = {}
        for case, (q, k, v, mask, _) in merge_cases().items():
            out, lse = partial(q, k, v, mask)
            if case == "large scores":     # what a merge without the running max gives: named
                wrong = naive_merge(*self.inputs(case))
                out, lse = (Like(x, ((w, NO_MAX, self.hints[case]),)) for x, w in
                            zip((out, lse), wrong))
            if mask is not None:           # NaN where neither block saw a key: named
                empty = ~mask.any(-1)
                out, lse = (Like(x, ((nan_rows(x, empty, i == 1), EMPTY_MERGE,
                                      self.hints[case]),)) for i, x in enumerate((out, lse)))
            exp.update({f"{case}/out": out, f"{case}/lse": lse})
        return {0: exp}

    def comm_rules(self, world_size):
        return [CommRule(c, "*", 0, ONLY_COMPUTES.format("merge_blocks")) for c in merge_cases()]


class RingAttention(RingCheck):
    """ring_attention, causal=False, each rank its own q, k, v (3 tokens, contiguous layout):
    every rank's rows of serial attention, also with scores in the thousands; communication;
    overlap (every receive followed by compute before its wait); received blocks held."""
    name, task = "ring_attention", "E8.2"
    causal, seed = False, 100
    phases = {"forward": 1.0, "forward large scores": LARGE}   # phase: scale of q
    measures = True             # overlap and memory, in the first phase

    def run(self, ctx):
        group = self.group(ctx)
        if group is not None:
            self.run_on(ctx, group)

    def run_on(self, ctx, group):
        """The check on this rank's group."""
        cp = ctx.impl.context_parallel
        for i, (phase, scale) in enumerate(self.phases.items()):
            q, k, v = (ctx.to(t) for t in self.blocks(self.seed, ctx.rank, scale))
            given = inputs_as_given(q=q, k=k, v=v)
            base = commlog.STATE.live_recv
            measure = self.measures and i == 0
            trace = commlog.STATE.trace = [] if measure else None
            try:
                with ctx.phase(phase), (Marks() if measure else contextlib.nullcontext()):
                    out = cp.ring_attention(q, k, v, causal=self.causal, group=group)
            finally:
                commlog.STATE.trace = None
            ctx.record_value(f"{phase}/{WRITTEN}", written(given))
            ctx.record(f"{phase}/output", out)
            if measure:
                ctx.record_value(f"{phase}/compute while the next block is in flight",
                                 overlapped(trace))
                record_held(ctx, phase, base)

    def expected(self, world_size):
        exp = {r: {} for r in range(world_size)}
        for members in self.groups(world_size):
            n = len(members)
            for i, (phase, scale) in enumerate(self.phases.items()):
                parts = [self.blocks(self.seed, m, scale) for m in members]
                full = [assemble([p[j] for p in parts], self.causal) for j in range(3)]
                out = serial_attention(*full, self.causal)[0].to(getattr(torch, self.dtype))
                for g, r in enumerate(members):
                    exp[r][f"{phase}/{WRITTEN}"] = "none"
                    exp[r][f"{phase}/output"] = rows(out, g, n, self.causal)
                    if scale >= LARGE and not self.causal:   # a merge without the running max
                        wrong = naive_ring(parts[g][0], [p[1] for p in parts],
                                           [p[2] for p in parts])[0].to(out.dtype)
                        exp[r][f"{phase}/output"] = Like(exp[r][f"{phase}/output"], (
                            (wrong, NO_MAX, HINTS["large scores"]),))
                    if self.causal and n > 1:   # a wrong block index, the cases exchanged
                        exp[r][f"{phase}/output"] = Like(exp[r][f"{phase}/output"],
                                                         forward_lookalikes(parts, g, out.dtype))
                    if self.measures and i == 0:
                        exp[r][f"{phase}/compute while the next block is in flight"] = True
                        exp[r].update(held_bounds(phase, self.kv_bytes(), False))
        return exp

    def rank_rules(self, members, g):
        return [rule for phase in self.phases
                for rule in forward_rules(phase, members, g, self.kv_bytes())]


class RingAttentionCausal(RingAttention):
    """ring_attention, causal=True, each rank's tokens its zig-zag shard (chunks r and 2N-1-r of
    two tokens each): every rank's rows of serial causal attention; communication (overlap and
    memory are the non-causal check's)."""
    name, task = "ring_attention_causal", "E8.3"
    causal, length, seed, measures = True, 4, 200, False
    phases = {"causal forward": 1.0}
    hints = dict(HINTS, **{"causal forward/output": CAUSAL})


class Subgroup(RingAttention):
    """ring_attention, causal=False, on the group of global ranks {0, 2} (rank 1 sits out):
    group ranks are not global ranks, and the group's are not consecutive."""
    name, task, world_sizes = "subgroup", "E8.2", (3,)
    phases, seed, measures = {"subgroup forward": 1.0}, 300, False
    hints = dict(HINTS, error=GROUP, **{"subgroup forward": GROUP})

    def members(self, world_size):
        return [[0, 2]]


# ---------------------------------------------------------------- E8.3: the zig-zag layout
class Zigzag(Check):
    """zigzag_shard of a tensor every rank has (dim 1, and the positions 0..S-1: the balance
    of the layout follows from them), zigzag_unshard of each rank's own shard (dim 1), and the
    ValueError for a length 2N does not divide."""
    exercise, name, task = EXERCISE, "zigzag", "E8.3"
    cpu_budget = 20.0
    CHUNK = 3
    BALANCE = "zigzag_shard positions/unmasked (query, key) pairs of this rank's tokens"
    RAISES = "raises/the exception zigzag_shard(x) raised where 2N does not divide x's length"
    hints = ZIGZAG_HINTS

    def full(self, world):
        return randn(400, 2, 2 * world * self.CHUNK, 3)

    def local(self, rank):
        return randn(410, 2, 2 * self.CHUNK, 3, owner=rank)

    def run(self, ctx):
        cp, group, n = ctx.impl.context_parallel, ctx.group, ctx.world_size
        with ctx.phase("zigzag_shard"):
            shard = cp.zigzag_shard(ctx.to(self.full(n)), 1, group=group)
        ctx.record("zigzag_shard/shard along dim 1", shard)
        tokens = torch.arange(2 * n * self.CHUNK, device=ctx.device)
        with ctx.phase("zigzag_shard positions"):
            pos = cp.zigzag_shard(tokens, 0, group=group)
        ok = isinstance(pos, torch.Tensor) and pos.dim() == 1
        ctx.record("zigzag_shard positions/positions of this rank's tokens", pos if ok else None)
        ctx.record_value(self.BALANCE, int((pos + 1).sum()) if ok else None)
        with ctx.phase("zigzag_unshard"):
            full = cp.zigzag_unshard(ctx.to(self.local(ctx.rank)), 1, group=group)
        ctx.record("zigzag_unshard/the whole tensor", full)
        bad = ctx.to(randn(420, 2 * n + 1, 2))
        with ctx.phase("raises"):
            ctx.record_value(self.RAISES, raises(lambda: cp.zigzag_shard(bad, 0, group=group))[0])

    def expected(self, world_size):
        n, c = world_size, self.CHUNK
        whole = assemble([self.local(r) for r in range(n)], causal=True, dim=1)
        exp = {}
        for r in range(n):
            where = zigzag_positions(r, n, 2 * c)
            exp[r] = {"zigzag_shard/shard along dim 1": self.full(n)[:, where],
                      "zigzag_shard positions/positions of this rank's tokens": torch.tensor(where),
                      self.BALANCE: c * c * (2 * n - 1) + c * (c + 1),
                      "zigzag_unshard/the whole tensor": whole,
                      self.RAISES: "ValueError"}
        return exp

    def comm_rules(self, world_size):
        n = world_size
        shard = self.local(0).numel() * 8
        rules = [CommRule(p, "*", 0, ONLY_COMPUTES.format("zigzag_shard"))
                 for p in ("zigzag_shard", "zigzag_shard positions", "raises")]
        return rules + [CommRule("zigzag_unshard", "collective", Bound(0, 1), GATHER),
                        CommRule("zigzag_unshard", "recv|irecv", Bound(0, n - 1), GATHER,
                                 nbytes=Bound(0, (n - 1) * shard))]


class SubgroupCausal(RingAttentionCausal):
    """ring_attention, causal=True, zigzag_shard and zigzag_unshard on groups whose ranks are not
    consecutive: {0, 2} at world size 3 (rank 1 sits out), {0, 2} and {1, 3} at 4 (each group
    its own sequence): r and N are the group's, in the causal cases as in the layout."""
    name, task, world_sizes = "subgroup_causal", "E8.3", (3, 4)
    phases, seed = {"subgroup causal forward": 1.0}, 350
    CHUNK = 6    # 2N x 6 tokens: what the world's 2N (6 or 8) divides too, so that a shard cut
                 # for the world is named by its shape, not by the ValueError
    SHARD = "subgroup zigzag_shard/shard along dim 1"
    WHOLE = "subgroup zigzag_unshard/the whole tensor"
    hints = dict(HINTS, error=GROUP, **{
        "subgroup causal forward": GROUP,
        "subgroup zigzag": "rule 'Group': zigzag_shard and zigzag_unshard take r and N from the "
                           "group (dist.get_rank(group), dist.get_world_size(group)), never from "
                           "the world: on a group of 2 ranks the sequence is cut in 4 chunks "
                           "whatever the world size, group rank r holds chunks r and 2N-1-r, and "
                           "zigzag_unshard gathers on the group (group=group); the group's ranks "
                           "need not be consecutive"})

    def members(self, world_size):
        return [[0, 2]] if world_size == 3 else [[0, 2], [1, 3]]

    def full(self, n):
        return randn(460, 2, 2 * n * self.CHUNK, 3)

    def local(self, rank):
        return randn(470, 2, 2 * self.CHUNK, 3, owner=rank)

    def run_on(self, ctx, group):
        super().run_on(ctx, group)
        cp = ctx.impl.context_parallel
        n = next(len(m) for m in self.members(ctx.world_size) if ctx.rank in m)
        with ctx.phase("subgroup zigzag_shard"):
            shard = cp.zigzag_shard(ctx.to(self.full(n)), 1, group=group)
        ctx.record(self.SHARD, shard)
        with ctx.phase("subgroup zigzag_unshard"):
            whole = cp.zigzag_unshard(ctx.to(self.local(ctx.rank)), 1, group=group)
        ctx.record(self.WHOLE, whole)

    def expected(self, world_size):
        exp = super().expected(world_size)
        key = f"{next(iter(self.phases))}/output"
        for members in self.groups(world_size):
            n, c = len(members), self.CHUNK
            parts = [self.blocks(self.seed, m) for m in members]
            whole = assemble([self.local(m) for m in members], causal=True, dim=1)
            for g, r in enumerate(members):
                if r != g:      # r taken for the global rank: named first (with N = 2 it
                    # may equal the cases exchanged, which ring_attention_causal would name)
                    global_rank = ring_forward(parts, g, me=r)[0].to(getattr(torch, self.dtype))
                    exp[r][key] = Like(exp[r][key].value, (
                        (global_rank, "r = the global rank (dist.get_rank() without the group)",
                         GROUP),) + exp[r][key].lookalikes)
                exp[r][self.SHARD] = self.full(n)[:, zigzag_positions(g, n, 2 * c)]
                exp[r][self.WHOLE] = whole
        return exp

    def rank_rules(self, members, g):
        shard = self.local(0).numel() * 8
        n = len(members)
        return super().rank_rules(members, g) + [
            CommRule("subgroup zigzag_shard", "*", 0, ONLY_COMPUTES.format("zigzag_shard")),
            CommRule("subgroup zigzag_unshard", "collective", Bound(0, 1), GATHER),
            CommRule("subgroup zigzag_unshard", "recv|irecv", Bound(0, n - 1), GATHER,
                     nbytes=Bound(0, (n - 1) * shard))]


# ---------------------------------------------------------------- E8.4: backward
class RingAttentionBackward(RingCheck):
    """ring_attention forward and backward, causal=False (3 tokens a rank), then causal=True
    (its zig-zag shard, 4 tokens): the gradients of every rank's own q, k and v against serial
    attention's; communication; overlap in backward (compute while each k/v block arrives);
    the received blocks held in both passes (none kept from forward to backward)."""
    name, task = "ring_attention_backward", "E8.4"
    CASES = {"": (False, 3, 500), "causal ": (True, 4, 600)}  # phase prefix: (causal, length, seed)
    hints = dict(HINTS, **{"causal forward/output": CAUSAL,
                           "causal backward/grad": "the non-causal gradients were right, the "
                                                   "causal ones are not: backward step k holds "
                                                   "rank s = (r + k) % N's block, and the three "
                                                   "cases of forward decide which of its scores "
                                                   "count: " + CAUSAL})

    def case_blocks(self, seed, rank, length):
        return blocks(seed, rank, length, 1.0, self.shape)

    def run(self, ctx):
        group = self.group(ctx)
        if group is None:
            return
        cp = ctx.impl.context_parallel
        for i, (prefix, (causal, length, seed)) in enumerate(self.CASES.items()):
            q, k, v = (ctx.to(t).requires_grad_(True)
                       for t in self.case_blocks(seed, ctx.rank, length))
            fwd, bwd = f"{prefix}forward", f"{prefix}backward"
            given = inputs_as_given(q=q, k=k, v=v)
            base = commlog.STATE.live_recv
            before = memory.live_storages()
            with ctx.phase(fwd):
                out = cp.ring_attention(q, k, v, causal=causal, group=group)
            ctx.record_value(f"{fwd}/{WRITTEN}", written(given))
            ctx.record(f"{fwd}/output", out)
            record_held(ctx, fwd, base)
            ctx.record_value(f"{fwd}/{FORWARD_KEPT}", memory.kept_bytes(
                before, [out, ctx.records, ctx.values], roots=[out]))
            if not (isinstance(out, torch.Tensor) and out.shape == q.shape and out.requires_grad):
                return     # the verdict reports the output; backward would only add noise
            grad = ctx.to(upstream(seed, ctx.rank, q.shape))
            given = inputs_as_given(q=q, k=k, v=v)
            trace = commlog.STATE.trace = [] if i == 0 else None
            try:
                with ctx.phase(bwd), (BlockMarks() if i == 0 else contextlib.nullcontext()):
                    (out * grad).sum().backward()
            finally:
                commlog.STATE.trace = None
            ctx.record_value(f"{bwd}/{WRITTEN}", written(given))
            del out
            record_held(ctx, bwd, base)
            if i == 0:
                ctx.record_value(f"{bwd}/{BLOCKS_OVERLAP}", blocks_overlapped(trace))
            for name, x in (("q", q), ("k", k), ("v", v)):
                ctx.record(f"{bwd}/grad {name}", x.grad)
            del q, k, v

    def expected(self, world_size):
        exp = {r: {} for r in range(world_size)}
        dtype = getattr(torch, self.dtype)
        for members in self.groups(world_size):
            n = len(members)
            for i, (prefix, (causal, length, seed)) in enumerate(self.CASES.items()):
                parts = [self.case_blocks(seed, m, length) for m in members]
                full = [assemble([p[j] for p in parts], causal) for j in range(3)]
                douts = [upstream(seed, m, p[0].shape) for m, p in zip(members, parts)]
                out, serial_grads = serial_attention(*full, causal, assemble(douts, causal))
                out, (dq, dk, dv) = out.to(dtype), [d.to(dtype) for d in serial_grads]
                kv = block_bytes(length, dtype, self.shape)
                wrong = backward_lookalikes(parts, douts, causal, dtype)   # known mistakes
                for g, r in enumerate(members):
                    e = exp[r]
                    e[f"{prefix}forward/{WRITTEN}"] = "none"
                    e[f"{prefix}forward/output"] = rows(out, g, n, causal)
                    if causal and n > 1:
                        e[f"{prefix}forward/output"] = Like(e[f"{prefix}forward/output"],
                                                            forward_lookalikes(parts, g, dtype))
                    e.update(held_bounds(f"{prefix}forward", kv, False))
                    e[f"{prefix}forward/{FORWARD_KEPT}"] = kept_bound(kv)
                    e.update(held_bounds(f"{prefix}backward", kv, True))
                    e[f"{prefix}backward/{WRITTEN}"] = "none"
                    if i == 0:
                        e[f"backward/{BLOCKS_OVERLAP}"] = True
                    for name, d in (("q", dq), ("k", dk), ("v", dv)):
                        e[f"{prefix}backward/grad {name}"] = Like(rows(d, g, n, causal),
                                                                  tuple(wrong[g][name]))
        return exp

    def rank_rules(self, members, g):
        dtype = getattr(torch, self.dtype)
        out = []
        for prefix, (_, length, _) in self.CASES.items():
            kv = block_bytes(length, dtype, self.shape)
            out += forward_rules(f"{prefix}forward", members, g, kv)
            out += backward_rules(f"{prefix}backward", members, g, kv)
        return out


class AttentionLayerTraining(RingCheck):
    """A one-layer causal attention block (q, k, v and output projections, 2 heads) whose
    attention is ring_attention, each rank its own 4 tokens (its zig-zag shard), trained one
    SGD and one Adam step: outputs, input gradients and weights after each step against the
    serial layer on the whole sequence. The first step calls the layer twice before one
    backward (two micro-batches); the first call's attention output must be as it was after
    the second call. The layer's weights are the same on every rank; the
    checker itself sums their gradients over the ranks (a data-parallel layer's work, not
    this exercise's: not in your communication log) before each step."""
    name, task = "attention_layer", "E8.4"
    follows = ("ring_attention_backward",)     # its layer's backward is ring_attention_backward
    causal, length, embed = True, 4, 8
    opt_steps = (("sgd", 1), ("adam", 1))
    hints = dict(HINTS, **{"output": CAUSAL,
                           "grad input": "step 1 calls the layer twice before one "
                                         "backward: what backward needs of a call lives in "
                                         "autograd's ctx (RingAttention's save_for_backward), "
                                         "never on the class or in a global (if "
                                         "ring_attention_backward passes its own check, its "
                                         "math is right and this is the likely cause). The "
                                         "math: " + HINTS["grad q"] + "; " + HINTS["grad k"],
                           **dict.fromkeys(("sgd", "adam"), STEPPED),
                           KEPT: "rule 'Results': an output changed when the layer was called "
                                 "again: ring_attention_forward (and RingAttention.forward) "
                                 "return a new out and lse each call, never a buffer kept (in a "
                                 "global, on the class) for the next call"})

    def layer(self):
        return AttentionLayer(self.embed, 2)

    def factors(self, world_size):
        return scale_factors(self.embed // 2)

    def tokens(self, step, rank):
        return randn(700 + 10 * step, 2, self.length, self.embed, owner=rank)

    def steps(self):
        """[(step, optimizer name, first step of that optimizer)]."""
        out, step = [], 0
        for name, count in self.opt_steps:
            for i in range(count):
                step += 1
                out.append((step, name, i == 0))
        return out

    def run(self, ctx):
        import torch.distributed as dist
        group = self.group(ctx)
        if group is None:
            return
        cp, causal = ctx.impl.context_parallel, self.causal
        model = seeded(self.layer, 700).to(device=ctx.device, dtype=ctx.dtype)

        attended = []     # the first call's attention output, and a copy of it then

        def attend(q, k, v):
            out = cp.ring_attention(q, k, v, causal=causal, group=group)
            if not attended and isinstance(out, torch.Tensor):
                attended.extend((out, out.detach().clone()))
            return out
        opt = None
        for step, opt_name, first in self.steps():
            if first:
                opt = Optimizer(opt_name, model.parameters())
            fwd, bwd = f"step{step} forward", f"step{step} backward"
            opt.zero_grad()
            calls = []        # (x, y, the y's seed): two calls before one backward in step 1
            for again in range(self.calls(step)):
                x = ctx.to(self.tokens(step + 50 * again, ctx.rank)).requires_grad_(True)
                phase = fwd + " again" * again
                with ctx.phase(phase):
                    y = model(x, attend)
                ctx.record(f"{phase}/output", y)
                if not (isinstance(y, torch.Tensor) and y.shape == x.shape and y.requires_grad):
                    return
                calls.append((x, y, 700 + step + 50 * again))
            if step == 1:
                unchanged = bool(attended) and torch.equal(*(t.detach() for t in attended))
                ctx.record_value(KEPT, unchanged)
                if not unchanged:
                    return    # backward would fail on the overwritten output: noise
            trace = commlog.STATE.trace = [] if step == 1 else None
            try:
                with ctx.phase(bwd), (BlockMarks() if step == 1 else contextlib.nullcontext()):
                    sum((y * ctx.to(upstream(seed, ctx.rank, y.shape))).sum()
                        for _, y, seed in calls).backward()
            finally:
                commlog.STATE.trace = None
            for again, (x, _, _) in enumerate(calls):
                ctx.record(f"{bwd}/grad input" + " again" * again, x.grad)
            if step == 1:
                ctx.record_value(f"{bwd}/{BLOCKS_OVERLAP}", blocks_overlapped(trace))
            params = [p for p in model.parameters() if p.grad is not None]
            if params:     # the checker's data-parallel sum, out of the exercise's log
                flat = torch.cat([p.grad.reshape(-1) for p in params])
                with commlog.unlogged():
                    dist.all_reduce(flat, group=group)
                for p, g in zip(params, flat.split([p.numel() for p in params])):
                    p.grad.copy_(g.view_as(p))
            with ctx.phase(f"step{step} {opt_name}"):
                opt.step()
            for name, p in model.named_parameters():
                ctx.record(f"step{step} {opt_name}/{name}", p)

    def calls(self, step):
        """How many times the layer runs before the step's one backward."""
        return 2 if step == 1 else 1

    def expected(self, world_size):
        exp = {r: {} for r in range(world_size)}
        dtype, causal = getattr(torch, self.dtype), self.causal

        def attend(q, k, v):
            return serial_attention(q, k, v, causal)[0]
        for members in self.groups(world_size):
            n = len(members)
            model, opt = seeded(self.layer, 700).to(dtype), None
            for step, opt_name, first in self.steps():
                if first:
                    opt = Optimizer(opt_name, model.parameters())
                opt.zero_grad()
                loss, calls = 0, []
                for again in range(self.calls(step)):
                    xs = [self.tokens(step + 50 * again, m).to(dtype) for m in members]
                    x = assemble(xs, causal, dim=1).requires_grad_(True)
                    y = model(x, attend)
                    grads = [upstream(700 + step + 50 * again, m, t.shape).to(dtype)
                             for m, t in zip(members, xs)]
                    loss = loss + (y * assemble(grads, causal, dim=1)).sum()
                    calls.append((x, y, " again" * again))
                loss.backward()
                opt.step()
                for g, r in enumerate(members):
                    for x, y, again in calls:
                        exp[r][f"step{step} forward{again}/output"] = rows(y.detach(), g, n,
                                                                          causal, 1)
                    if step == 1:
                        exp[r][KEPT] = True
                    for x, y, again in calls:
                        exp[r][f"step{step} backward/grad input{again}"] = rows(x.grad, g, n,
                                                                               causal, 1)
                    if step == 1:
                        exp[r][f"step1 backward/{BLOCKS_OVERLAP}"] = True
                    exp[r].update({f"step{step} {opt_name}/{name}": p.detach().clone()
                                   for name, p in model.named_parameters()})
        return exp

    def rank_rules(self, members, g):
        kv, out = self.kv_bytes(), []
        for step, opt_name, _ in self.steps():
            for again in range(self.calls(step)):
                out += forward_rules(f"step{step} forward" + " again" * again, members, g, kv)
            out += backward_rules(f"step{step} backward", members, g, kv, self.calls(step))
            out.append(CommRule(f"step{step} {opt_name}", "*", 0, "the optimizer step only "
                                                                "computes"))
        return out

    def kv_bytes(self):
        """k and v of one layer: heads x (embed / heads) = embed values per token and batch."""
        return block_bytes(self.length, getattr(torch, self.dtype), (2, 2, self.embed // 2))


for _check in (RingAttention, Zigzag, RingAttentionBackward, AttentionLayerTraining):
    _check.run = required_first(_check.run)     # E4's stubs say: implement rotation first
del _check
