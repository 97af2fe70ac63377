"""Hidden checks for E3 `tensor_parallel` (instructor edition only).

Other shapes (odd batch and sequence, no bias, 2-dim heads), three steps, float32,
fresh layers (constructor shapes, attributes, init range), the communicated bytes,
the LM's ReLU pair through `from_linears`, subgroups of three ranks, another model
configuration and the TypeError for a model that is not a course transformer.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from rtp_course.checker.common import seeded
from rtp_course.checker.public import tensor_parallel as pub
from rtp_course.checker.public.tensor_parallel_harness import OnSubgroup
from rtp_course.checker.registry import Bound, Check, CommRule
from rtp_course.models import FeedForward, SelfAttention

H, F = pub.HIDDEN, pub.FFN
PAD = 3  # a padding_idx


class _Hidden:
    hidden = True


class _Float32(_Hidden):
    dtype, adam_eps = "float32", 1e-3   # float32 rounding noise must not drive Adam


class ColumnNoBiasOddShapes(_Hidden, pub.ColumnParallel):
    name, batch, seq, steps = "ColumnParallelLinear_no_bias_odd_shapes", 3, 5, 3

    def serial(self):
        return seeded(lambda: nn.Linear(H, F, bias=False), 11)


class RowNoBiasFloat32(_Float32, pub.RowParallel):
    name, batch, seq = "RowParallelLinear_no_bias_float32", 3, 5

    def serial(self):
        return seeded(lambda: nn.Linear(F, H, bias=False), 12)


class MLPReluPair(_Hidden, pub.MLP):
    """The LM's linear1 / ReLU / linear2 through from_linears, three steps."""
    name, steps, seq = "ParallelMLP_from_linears_relu", 3, 6

    def parallel(self, tp, serial, group):
        return tp.ParallelMLP.from_linears(serial.fc1, serial.fc2, nn.ReLU(), group=group)

    def serial(self):
        def make():
            ff = FeedForward(H, F)
            ff.act = nn.ReLU()
            return ff
        return seeded(make, 13)


class MLPBytes(_Hidden, pub.MLP):
    """The pair all-reduces the [B, S, E] output in forward and dx of the same size in backward."""
    name = "ParallelMLP_bytes"

    def comm_rules(self, world_size):
        if world_size == 1:
            return []
        size, calls = self.batch * self.seq * H * 8, self.calls_before_backward
        return [CommRule(p, "all_reduce", calls, "one all-reduce of a [B, S, E] tensor per call, "
                         "nothing larger (never the [B, S, ffn/N] hidden activation)",
                         nbytes=calls * size)
                for p in ("forward", "backward")]


class AttentionSmallHeads(_Hidden, pub.Attention):
    """12 heads of 2 features, causal: head_dim = 2 is far from E/N."""
    name, causal, in_dim, out_dim, seq = "ParallelSelfAttention_head_dim_2_causal", True, 24, 24, 7

    def serial(self):
        return seeded(lambda: SelfAttention(24, 12, causal=True), 14)


class AttentionMHAFloat32(_Float32, pub.AttentionMHA):
    name, batch = "ParallelSelfAttention_from_MultiheadAttention_float32", 3


class AttentionMHANoBias(_Hidden, pub.AttentionMHA):
    name = "ParallelSelfAttention_from_MultiheadAttention_no_bias"

    def serial(self):
        return seeded(lambda: nn.MultiheadAttention(H, pub.HEADS, bias=False), 15)


class AttentionSubgroup(_Hidden, OnSubgroup, pub.AttentionMHA):
    name, world_sizes = "ParallelSelfAttention_subgroup", (4,)
    hints = dict(pub.AttentionMHA.hints, **pub.SUBGROUP)


class ModelLMOtherConfig(_Float32, pub.ModelLM):
    """One layer, E = 24, hidden 48, 12 heads of 2, three steps, float32; GELU, which has no
    kink for float32 rounding to flip (see models.DecoderLayer)."""
    name, seed, steps = "parallelize_transformer_lm_other_config_float32", 21, 3
    overrides = dict(ninp=24, nhid=48, num_decoder_layers=1, activation="gelu")
    tolerance = {torch.float32: (1e-3, 1e-4)}   # three steps of rounding: see flyweight's
    comm = {"forward": {"all_gather": 1, "all_reduce": 2}, "backward": {"all_reduce": 2}}


class ModelBertThreeSteps(_Hidden, pub.Model):
    name, seed, steps, batch = "parallelize_transformer_bert_three_steps", 22, 3, 3


class FreshLayers(_Hidden, Check):
    """Layers built by their constructors: shard shapes, serial sizes, dtype, init from the
    SERIAL fan-in, a zero row bias (equal on every rank without communication)."""
    exercise, name = "tensor_parallel", "fresh_layers"
    task = "E3.1"       # the first constructor; the check builds every layer
    hints = {"structure/": "see the docstring: shard shapes, the SERIAL in/out sizes as "
                           "attributes, parameters in the requested dtype",
             "init/": "a fresh linear shard is U(-1/sqrt(in), 1/sqrt(in)) with `in` the SERIAL "
                      "fan-in (not in/N); a fresh row layer's bias starts at 0"}

    def layers(self, tp, g):
        kw = dict(group=g, dtype=torch.float64)
        return {"column": tp.ColumnParallelLinear(H, F, **kw),
                "row": tp.RowParallelLinear(F, H, **kw),
                "mlp": tp.ParallelMLP(H, F, **kw),
                "embedding": tp.ParallelEmbedding(pub.VOCAB, H, padding_idx=PAD, **kw),
                "attention": tp.ParallelSelfAttention(H, pub.HEADS, **kw)}

    def run(self, ctx):
        with ctx.phase("structure"):
            m = self.layers(ctx.impl.tensor_parallel, ctx.group)
        rec = ctx.record_value
        for name, layer in m.items():
            rec(f"structure/{name} parameter shapes",
                {n: list(p.shape) for n, p in layer.named_parameters()})
            rec(f"structure/{name} dtypes", sorted({str(p.dtype) for p in layer.parameters()}))
        for name in ("column", "row"):
            rec(f"structure/{name} (in_features, out_features)",
                [m[name].in_features, m[name].out_features])
        a = m["attention"]
        rec("structure/attention (num_heads, local_heads, head_dim)",
            [a.num_heads, a.local_heads, a.head_dim])
        rec("init/column weight max abs", m["column"].weight.abs().max().item())
        rec("init/row weight max abs", m["row"].weight.abs().max().item())
        rec("init/row bias max abs", m["row"].bias.abs().max().item())
        table = m["embedding"].weight.detach()
        rec("init/embedding weight std", table[torch.arange(len(table)) != PAD].std().item())
        rec("init/embedding padding row max abs", table[PAD].abs().max().item())

    def expected(self, world_size):
        n = world_size
        col = {"weight": [F // n, H], "bias": [F // n]}
        row = {"weight": [H, F // n], "bias": [H]}
        sub = lambda pre, d: {f"{pre}.{k}": v for k, v in d.items()}  # noqa: E731
        att = {**sub("q_proj", {"weight": [H // n, H], "bias": [H // n]}),
               **sub("k_proj", {"weight": [H // n, H], "bias": [H // n]}),
               **sub("v_proj", {"weight": [H // n, H], "bias": [H // n]}),
               **sub("out_proj", {"weight": [H, H // n], "bias": [H]})}
        shapes = {"column": col, "row": row, "mlp": {**sub("fc1", col), **sub("fc2", row)},
                  "embedding": {"weight": [pub.VOCAB, H // n]}, "attention": att}
        exp = {}
        for name, s in shapes.items():
            exp[f"structure/{name} parameter shapes"] = s
            exp[f"structure/{name} dtypes"] = ["torch.float64"]
        exp["structure/column (in_features, out_features)"] = [H, F]
        exp["structure/row (in_features, out_features)"] = [F, H]
        exp["structure/attention (num_heads, local_heads, head_dim)"] = [12, 12 // n, H // 12]
        exp["init/column weight max abs"] = Bound(0.8 / math.sqrt(H), 1 / math.sqrt(H),
                                                  "U(-1/sqrt(in), 1/sqrt(in)), in = 48")
        exp["init/row weight max abs"] = Bound(0.8 / math.sqrt(F), 1 / math.sqrt(F),
                                               "U(-1/sqrt(in), 1/sqrt(in)), in = 96 (serial)")
        exp["init/row bias max abs"] = 0.0
        exp["init/embedding weight std"] = Bound(0.8, 1.2, "N(0, 1), like nn.Embedding")
        exp["init/embedding padding row max abs"] = 0.0
        return {r: exp for r in range(world_size)}




class AttentionMHABFloat16(_Hidden, pub.AttentionMHA):
    """bfloat16: a helper tensor made in the default float32 (a mask, a scale) promotes the
    scores, and the output, to float32. Rounding of bfloat16's size, a bug of O(1)."""
    name, dtype, adam_eps = "ParallelSelfAttention_from_MultiheadAttention_bfloat16", "bfloat16", 1e-3
    tolerance = {torch.bfloat16: (5e-2, 5e-2)}
