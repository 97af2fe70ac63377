"""Hidden checks for E8 `context_parallel` (instructor edition only): other shapes (3 heads, head
dim 5, 3-token chunks, one sequence), float32, scores in the thousands under the causal mask,
subgroups whose ranks are not consecutive for the backward and the training, a non-causal
layer trained three SGD and two Adam steps, the zig-zag helpers on other dims and dtypes, and
bfloat16."""
from __future__ import annotations

import torch

from rtp_course.checker.common import randint, randn
from rtp_course.checker.public import context_parallel as pub
from rtp_course.checker.public.context_parallel_harness import LARGE, assemble, zigzag_positions
from rtp_course.checker.public.tensor_parallel_harness import raises
from rtp_course.checker.registry import Bound, CommRule


class CausalLargeScores(pub.RingAttentionCausal):
    """Causal forward, scores in the thousands, 3 heads of dim 5, 6 tokens a rank."""
    name, hidden = "ring_attention_causal_large_scores", True
    length, shape, seed = 6, (1, 3, 5), 1200
    phases = {"causal forward large scores": LARGE}
    hints = dict(pub.HINTS, **{"causal forward large scores/output": pub.HINTS["large scores"]
                               + "; " + pub.CAUSAL})


class BackwardShapes(pub.RingAttentionBackward):
    """Forward and backward with 3 heads of dim 5: 5 tokens a rank (non-causal), 6 (causal)."""
    name, hidden = "ring_attention_backward_shapes", True
    shape = (1, 3, 5)
    CASES = {"": (False, 5, 1300), "causal ": (True, 6, 1400)}


class RingAttentionBfloat16(pub.RingAttention):
    """ring_attention in bfloat16 (rule 'Dtypes': a buffer or mask made in the default float32
    promotes the output); rounding of bfloat16's size (8 bits of mantissa), a bug of O(1)."""
    name, hidden, dtype, seed = "ring_attention_bfloat16", True, "bfloat16", 1900
    phases, measures = {"forward": 1.0}, False
    tolerance = {torch.bfloat16: (5e-2, 5e-2)}


class BackwardFloat32(pub.RingAttentionBackward):
    """Forward and backward in float32."""
    name, hidden, dtype = "ring_attention_backward_float32", True, "float32"
    CASES = {"": (False, 3, 1500), "causal ": (True, 4, 1600)}


class BackwardSubgroup(pub.RingAttentionBackward):
    """Forward and backward on global ranks 1..N-1 (N = 3: {1, 2}; N = 4: {1, 2, 3})."""
    name, hidden, world_sizes = "ring_attention_backward_subgroup", True, (3, 4)
    CASES = {"": (False, 3, 1700), "causal ": (True, 4, 1800)}
    hints = dict(pub.RingAttentionBackward.hints, error=pub.GROUP, forward=pub.GROUP,
                 backward=pub.GROUP)

    def members(self, world_size):
        return [list(range(1, world_size))]


class LayerPairs(pub.AttentionLayerTraining):
    """The causal layer on two groups at once, {0, 1} and {2, 3}, each its own sequence."""
    name, hidden, world_sizes = "attention_layer_pairs", True, (4,)
    hints = dict(pub.AttentionLayerTraining.hints, error=pub.GROUP)

    def members(self, world_size):
        return [[0, 1], [2, 3]]


class LayerNonCausalLonger(pub.AttentionLayerTraining):
    """A non-causal layer, 5 tokens a rank, three SGD then two Adam steps."""
    name, hidden = "attention_layer_non_causal", True
    causal, length = False, 5
    opt_steps = (("sgd", 3), ("adam", 2))
    hints = dict(pub.AttentionLayerTraining.hints, output=pub.HINTS["output"])


class LayerFloat32(pub.AttentionLayerTraining):
    """The causal layer in float32, two SGD steps."""
    name, hidden, dtype = "attention_layer_float32", True, "float32"
    opt_steps = (("sgd", 2),)
    tolerance = {torch.float32: (1e-4, 2e-5)}


class ZigzagMore(pub.Zigzag):
    """zigzag_shard along the last dim of a 4-D tensor and of a 1-D int64 one; zigzag_unshard
    of an int64 shard along dim 0 and of a float32 one along dim -2; the ValueError for a
    length that N but not 2N divides."""
    name, hidden = "zigzag_more", True
    C = 2

    def run(self, ctx):
        cp, group, n = ctx.impl.context_parallel, ctx.group, ctx.world_size
        with ctx.phase("zigzag_shard"):
            a = cp.zigzag_shard(ctx.to(randn(430, 2, 1, 3, 2 * n * self.C)), -1, group=group)
            b = cp.zigzag_shard(ctx.to(randint(431, 50, 2 * n * self.C)), 0, group=group)
        ctx.record("zigzag_shard/along the last dim", a)
        ctx.record("zigzag_shard/int64", b)
        with ctx.phase("zigzag_unshard"):
            c = cp.zigzag_unshard(ctx.to(randint(432, 50, 2 * self.C, 2, owner=ctx.rank)), 0,
                                  group=group)
            d = cp.zigzag_unshard(self.local32(ctx.rank).to(ctx.device), -2, group=group)
        ctx.record("zigzag_unshard/int64 along dim 0", c)
        ctx.record("zigzag_unshard/float32 along dim -2", d)
        bad = ctx.to(randn(433, 3, n * (2 * self.C + 1)))     # N divides it, 2N does not
        with ctx.phase("raises"):
            ctx.record_value(self.RAISES, raises(lambda: cp.zigzag_shard(bad, 1, group=group))[0])

    def local32(self, rank):
        return randn(434, 3, 2 * self.C, 2, owner=rank).float()

    def expected(self, world_size):
        n = world_size
        exp = {}
        ints = assemble([randint(432, 50, 2 * self.C, 2, owner=r) for r in range(n)], True, 0)
        floats = assemble([self.local32(r) for r in range(n)], True, 1)
        for r in range(n):
            where = zigzag_positions(r, n, 2 * self.C)
            exp[r] = {"zigzag_shard/along the last dim":
                      randn(430, 2, 1, 3, 2 * n * self.C)[..., where],
                      "zigzag_shard/int64": randint(431, 50, 2 * n * self.C)[where],
                      "zigzag_unshard/int64 along dim 0": ints,
                      "zigzag_unshard/float32 along dim -2": floats,
                      self.RAISES: "ValueError"}
        return exp

    def comm_rules(self, world_size):
        n = world_size
        rules = [CommRule(p, "*", 0, pub.ONLY_COMPUTES.format("zigzag_shard"))
                 for p in ("zigzag_shard", "raises")]
        shards = 2 * self.C * 2 * 8 + 3 * 2 * self.C * 2 * 4      # the int64 and float32 ones
        return rules + [CommRule("zigzag_unshard", "collective", Bound(0, 2), pub.GATHER),
                        CommRule("zigzag_unshard", "recv|irecv", Bound(0, 2 * (n - 1)), pub.GATHER,
                                 nbytes=Bound(0, (n - 1) * shards))]
