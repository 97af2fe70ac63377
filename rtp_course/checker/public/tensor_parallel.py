"""Public checks for E3 `tensor_parallel`: the Megatron layers and the TP transformer.

Every rank builds the same seeded serial module, shards it with `from_serial` and
feeds the SAME input (tensor-parallel semantics). Per rank the checker compares:
which slice of each serial parameter the rank holds ("structure/"), the forward
output, the input gradient, each shard's gradient against the same slice of the
serial gradient (replicated parameters: the full gradient), and the shards after
2 SGD and 2 Adam steps; and the collectives each layer makes. The machinery is
in tensor_parallel_harness.py; here: the cases and the hints.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rtp_course.checker.common import randint, randn, seeded
from rtp_course.checker.public.tensor_parallel_harness import (KEPT, KEPT_HINT, OnSubgroup,
                                                               TPCheck, _SizesNotDivisible, raises)
from rtp_course.checker.registry import Check, CommRule
from rtp_course.models import FeedForward, SelfAttention, build_model, causal_mask, lm_loss

HIDDEN, FFN, HEADS, VOCAB = 48, 96, 12, 96   # 12 heads: N = 1..4 all divide

COLUMN_SHARD = ("a column layer keeps weight ROWS [r*out/N, (r+1)*out/N) of the serial W [out, in] "
                "and that slice of the bias, r = dist.get_rank(group)")
ROW_SHARD = ("a row layer keeps weight COLUMNS [r*in/N, (r+1)*in/N) of the serial W [out, in] "
             "and the WHOLE bias, r = dist.get_rank(group)")
EMBEDDING_SHARD = ("an embedding keeps table COLUMNS [r*dim/N, (r+1)*dim/N) of the serial "
                   "[num, dim] table (the embedding dim is split, not the vocabulary), "
                   "r = dist.get_rank(group)")
HEADS_SHARD = ("rank r owns heads [r*H/N, (r+1)*H/N): rows [r*E/N, (r+1)*E/N) of Wq, Wk, Wv (and "
               "their biases) and the same COLUMNS of Wo; out_proj's bias is whole")
SLICING = ("building the layer failed: rank r = dist.get_rank(group) of N = "
           "dist.get_world_size(group) keeps the r-th of N equal contiguous slices of the split "
           "dim (start r*size/N, length size/N), copied into parameters of the shard's shape")
HINTS = {
    "error/structure": SLICING,
    "structure/": "; ".join((COLUMN_SHARD, ROW_SHARD, EMBEDDING_SHARD, HEADS_SHARD)),
    "memory/": "rule 'Memory': the layer keeps a tensor besides its parameters (a copy of the "
               "serial weights in an attribute, a dict or a list): keep only your shards",
    "structure/parameters": "the checker reads the attributes the docstring names (weight, "
                            "bias, fc1, fc2, q_proj, k_proj, v_proj, out_proj); keep no other "
                            "parameters (no copy of the serial module)",
    "backward/grad": "each shard's gradient must be the same slice of the serial gradient; a "
                     "replicated parameter (a row layer's bias) gets the FULL gradient everywhere. "
                     "The first step calls the module twice before one backward: what backward "
                     "needs of a call lives in autograd's context (ctx.save_for_backward), never "
                     "on the layer or its class, where the next call overwrites it",
    "backward/grad input": "the same x feeds every rank's shard, so dL/dx is the SUM over ranks: "
                           "start the layer with comm.duplicate(x, group) (backward all-reduce)",
    KEPT: KEPT_HINT,
    "step": "forward and gradients were right but the weights after the optimizer steps are not: "
            "the shards must be nn.Parameters of the layer (model.parameters()) and nothing may "
            "change them outside backward and opt.step()",
}
FROZEN = ("rule 'Frozen and unused': a serial parameter that does not require grad (here the "
          "BERT's positional table) stays frozen in its shard and gets no gradient: a fresh "
          "nn.Parameter requires grad whatever it was made from, so set "
          "requires_grad=serial.requires_grad (or requires_grad_(...)) on the shard")
BIAS_ONCE = ("the row layer adds its replicated bias ONCE, after the all-reduce: "
             "y = all_reduce(x_r W_r^T) + b (adding it before the reduction counts it N times; "
             "adding it on one rank only leaves the other ranks' bias without gradient)")


class ColumnParallel(TPCheck):
    name, root, split_out, in_dim, out_dim = "ColumnParallelLinear", "fc1", True, HIDDEN, FFN
    comm = {"backward": {"all_reduce": 1}}
    comm_hint = "a column layer without gather_output: no communication in forward, one " \
                "all-reduce of dx in backward (comm.duplicate)"
    hints = dict(HINTS, **{"structure/": COLUMN_SHARD,
                           "forward/output": "y_r = x W_r^T + b_r is this rank's slice "
                           "[..., out/N] of the serial output (no gather without gather_output)"})

    def serial(self):
        return seeded(lambda: nn.Linear(HIDDEN, FFN), 1)

    def parallel(self, tp, serial, group):
        return tp.ColumnParallelLinear.from_serial(serial, gather_output=False, group=group)


class ColumnParallelGather(ColumnParallel):
    name, split_out = "ColumnParallelLinear_gather_output", False
    comm = {"forward": {"all_gather": 1}, "backward": {"all_reduce": 1}}
    comm_hint = "gather_output=True: one all-gather in forward, one all-reduce in backward"
    hints = dict(HINTS, **{"structure/": COLUMN_SHARD,
                           "forward/output": "gather_output=True: all-gather the ranks' slices "
                           "along the LAST dim (comm.all_gather(y, dim=-1)), giving the full "
                           "serial output [..., out] on every rank"})

    def parallel(self, tp, serial, group):
        return tp.ColumnParallelLinear.from_serial(serial, gather_output=True, group=group)


class RowParallel(TPCheck):
    name, root, split_in, seed, in_dim = "RowParallelLinear", "fc2", True, 1, FFN
    comm = {"forward": {"all_reduce": 1}}
    comm_hint = "a row layer with input_is_parallel: one all-reduce in forward, none in backward"
    hints = dict(HINTS, **{"structure/": ROW_SHARD,
                           "forward/output": BIAS_ONCE, "backward/grad bias": BIAS_ONCE,
                           "backward/grad input": "x_r W_r^T only involves this rank's slice x_r: "
                           "its gradient is the slice of the serial dL/dx, no communication"})

    def serial(self):
        return seeded(lambda: nn.Linear(FFN, HIDDEN), 2)

    def parallel(self, tp, serial, group):
        return tp.RowParallelLinear.from_serial(serial, input_is_parallel=True, group=group)


class RowParallelFullInput(RowParallel):
    name, split_in = "RowParallelLinear_full_input", False
    comm = {"forward": {"all_reduce": 1}, "backward": {"all_gather": 1}}
    comm_hint = "input_is_parallel=False: split x (forward free, backward one all-gather), " \
                "then one all-reduce in forward"
    hints = dict(RowParallel.hints, **{"backward/grad input": "with input_is_parallel=False take "
                 "the slice with comm.split(x, dim=-1): its backward all-gathers dL/dx"})

    def parallel(self, tp, serial, group):
        return tp.RowParallelLinear.from_serial(serial, input_is_parallel=False, group=group)


class MLP(TPCheck):
    name, seed = "ParallelMLP", 2
    comm = {"forward": {"all_reduce": 1}, "backward": {"all_reduce": 1}}
    comm_hint = ("the column/row pair: exactly one all-reduce in forward (fc2) and one in "
                 "backward (fc1's duplicate), nothing between fc1 and fc2: fc1 WITHOUT "
                 "gather_output, fc2 with input_is_parallel=True, so the hidden slice never "
                 "leaves its rank")
    hints = dict(HINTS, **{"structure/": "fc1: " + COLUMN_SHARD + "; fc2: " + ROW_SHARD,
                           "forward/output": "fc2(act(fc1(x))) with fc1 column-parallel (no "
                           "gather) and fc2 row-parallel (input_is_parallel): the hidden slice "
                           "stays on its rank, no communication between fc1 and fc2; " + BIAS_ONCE,
                           "backward/grad fc2.bias": BIAS_ONCE})

    def serial(self):
        return seeded(lambda: FeedForward(HIDDEN, FFN), 3)

    def parallel(self, tp, serial, group):
        return tp.ParallelMLP.from_serial(serial, group=group)


class Embedding(TPCheck):
    name, root, out_dim = "ParallelEmbedding", "embedding", HIDDEN
    comm = {"forward": {"all_gather": 1}}
    comm_hint = "an embedding: one all-gather in forward, nothing in backward"
    hints = dict(HINTS, **{"structure/": EMBEDDING_SHARD,
                           "forward/output": "look up ids in your shard [num, dim/N], then "
                           "all-gather along the last dim: the full [..., dim] on every rank"})

    def serial(self):
        return seeded(lambda: nn.Embedding(VOCAB, HIDDEN), 4)

    def inputs(self, step):
        return (randint(400 + step, VOCAB, self.batch, self.seq),
                randn(7 + step, self.batch, self.seq, HIDDEN))

    def parallel(self, tp, serial, group):
        return tp.ParallelEmbedding.from_serial(serial, group=group)


ATTENTION = ("per local head: softmax(q k^T / sqrt(d)) v with d = E/H the serial head dim "
             "(NOT E/N), q/k/v viewed as [B, S, H/N, d] (heads first); then the partial output "
             "ctx W_o,r^T is all-reduced and b_o added once after it; ")


class Attention(TPCheck):
    name, seed, causal = "ParallelSelfAttention", 3, False
    comm = {"forward": {"all_reduce": 1}, "backward": {"all_reduce": 1}}
    comm_hint = "attention: one all-reduce in forward (out_proj), one in backward (duplicate of x)"
    hints = dict(HINTS, **{
        "forward/output": ATTENTION + BIAS_ONCE,
        "structure/": HEADS_SHARD,
        "backward/grad out_proj.bias": BIAS_ONCE})

    def serial(self):
        return seeded(lambda: SelfAttention(HIDDEN, HEADS, causal=self.causal), 5)

    def parallel(self, tp, serial, group):
        return tp.ParallelSelfAttention.from_serial(serial, group=group)


class AttentionMHA(Attention):
    """From PyTorch's nn.MultiheadAttention (packed q/k/v), sequence first (batch_first=False,
    its default), not marked causal and called with the causal attn_mask: the mask the call
    passes is what makes it causal."""
    name, causal = "ParallelSelfAttention_from_MultiheadAttention", True
    hints = dict(Attention.hints, **{
        "forward/output": "call it as the nn.MultiheadAttention it replaces: inputs [L, B, E] "
                          "when the module has batch_first=False (its default), [B, L, E] "
                          "otherwise, and the attn_mask it is given applied (here the causal "
                          "one, on a module not marked causal); " + ATTENTION + BIAS_ONCE})

    def serial(self):
        return seeded(lambda: nn.MultiheadAttention(HIDDEN, HEADS), 6)

    def forward(self, module, x):   # x [L, B, E]: sequence first
        return module(x, x, x, attn_mask=causal_mask(x.shape[0], x.device), need_weights=False)[0]


class Model(TPCheck):
    """parallelize_transformer on a tiny course model: logits, shard gradients, steps. The
    BERT's positional table is frozen (pretrained tables often are): its shard stays frozen
    and gets no gradient. The first step calls the model twice before one backward."""
    name, model, seed, out_dim, seq = "parallelize_transformer_bert", "bert", 4, 12, 12
    two_forwards = True
    comm = {"forward": {"all_gather": 2, "all_reduce": 4}, "backward": {"all_reduce": 4}}
    comm_hint = "2 blocks: per block one all-reduce in forward and one in backward for the " \
                "attention and for the MLP; one all-gather per embedding in forward"
    hints = {"structure/": HINTS["structure/"], "error/structure": SLICING, KEPT: KEPT_HINT,
             "structure/parameters": HINTS["structure/parameters"],
             "structure/frozen": FROZEN, "(frozen)": FROZEN,
             "": "if a layer check above fails, fix that layer first; otherwise swap in the "
                 "parallel layers with from_serial (BERT: tok_emb, pos_emb, blocks[i].attn, "
                 "blocks[i].mlp; LM: embedding, layers[i].self_attn, linear1, linear2) and keep "
                 "LayerNorms and the head / decoder serial"}
    overrides: dict = {}

    def serial(self, seed=None, owner=None):
        """The tiny model from `seed`, or from `seed` and the key of `owner` (checker.inputs: a
        set of ranks, a replica's, in the 2D checks; a rank asks the parent for it with
        common.owned_module(check, "case.build", ...))."""
        with torch.random.fork_rng(devices=[]):     # the global generator left as it was
            return seeded(self.build, self.seed if seed is None else seed, owner=owner)

    def build(self):
        model = build_model(self.model, tiny=True, **self.overrides)
        if self.model == "bert":
            model.pos_emb.requires_grad_(False)
        return model

    def parallel(self, tp, serial, group):
        return tp.parallelize_transformer(serial, group)

    def inputs(self, step, batch=None, owner=None):
        """Token ids [batch, seq] and labels ([batch] classes, or [batch, seq] next tokens);
        `owner`: the ranks whose own data this is (checker.inputs), None for shared data."""
        batch = batch or self.batch
        labels = (randint(500 + step, 12, batch, owner=owner) if self.model == "bert"
                  else randint(500 + step, VOCAB, batch, self.seq, owner=owner))
        return randint(600 + step, VOCAB, batch, self.seq, owner=owner), labels

    def out_shape(self, world):
        lm = self.model == "lm"   # logits [B, classes] or [B, S, vocab]
        return (self.batch, self.seq, self.out_dim) if lm else (self.batch, self.out_dim)

    def loss(self, y, target, rank=0, world=1):
        return F.cross_entropy(y, target) if self.model == "bert" else lm_loss(y, target)


class ModelLM(Model):
    name, model, seed, out_dim = "parallelize_transformer_lm", "lm", 5, VOCAB
    comm = {"forward": {"all_gather": 1, "all_reduce": 4}, "backward": {"all_reduce": 4}}
    comm_hint = "2 layers: per layer one all-reduce in forward and one in backward for the " \
                "attention and for linear1/linear2; one all-gather (the embedding) in forward"


GROUP = ("rule 'Group': on a subgroup, use the rank and size WITHIN `group` (dist.get_rank(group), "
         "dist.get_world_size(group)), never dist.get_rank(), and pass `group` to every collective")
SUBGROUP = {"": GROUP, "error/structure": GROUP, "structure/": GROUP,
            "deadlock": "rank 1 is not in `group` and never joins: a collective called without "
                        "group= is over the whole world and waits for it for ever; " + GROUP}


class Subgroup(OnSubgroup, MLP):
    """ParallelMLP on the group {0, 2} (rank 1 sits out): `group` must be honoured."""
    name, world_sizes = "ParallelMLP_subgroup", (3,)
    hints = dict(MLP.hints, **SUBGROUP)


class EmbeddingSubgroup(OnSubgroup, Embedding):
    """ParallelEmbedding on {0, 2} and {0, 2, 3}: its rank, size and all-gather must use
    `group`."""
    name, world_sizes = "ParallelEmbedding_subgroup", (3, 4)
    hints = dict(Embedding.hints, **SUBGROUP)


class ModelSubgroup(OnSubgroup, Model):
    """parallelize_transformer on {0, 2}: every layer it builds gets `group` (the embeddings
    too), as E6 does with each tensor-parallel group."""
    name, world_sizes, two_forwards = "parallelize_transformer_subgroup", (3,), False
    hints = dict(Model.hints, **SUBGROUP)


class ColumnSizes(_SizesNotDivisible):
    name, layer = "ColumnParallelLinear_sizes_not_divisible", "ColumnParallelLinear"

    def make(self, tp, g):
        return tp.ColumnParallelLinear(HIDDEN, 10, group=g)


class RowSizes(_SizesNotDivisible):
    name, layer = "RowParallelLinear_sizes_not_divisible", "RowParallelLinear"

    def make(self, tp, g):
        return tp.RowParallelLinear(10, HIDDEN, group=g)


class MLPSizes(_SizesNotDivisible):
    name, layer = "ParallelMLP_sizes_not_divisible", "ParallelMLP"

    def make(self, tp, g):
        return tp.ParallelMLP(HIDDEN, 10, group=g)


class EmbeddingSizes(_SizesNotDivisible):
    name, layer = "ParallelEmbedding_sizes_not_divisible", "ParallelEmbedding"

    def make(self, tp, g):
        return tp.ParallelEmbedding(VOCAB, 10, group=g)


class AttentionSizes(_SizesNotDivisible):
    name, layer = "ParallelSelfAttention_sizes_not_divisible", "ParallelSelfAttention"

    def make(self, tp, g):
        return tp.ParallelSelfAttention(40, 10, group=g)


PAD = 3  # a padding_idx


class NotATransformer(Check):
    """The TypeError parallelize_transformer promises for a model it does not know."""
    exercise, name, world_sizes = "tensor_parallel", "parallelize_transformer_rejects_cnn", (2,)
    task, isolated = "E3.6", True
    hints = {"": "rule 'Raises': parallelize_transformer raises TypeError for a model that is neither a course "
                 "BertClassifier nor a TransformerLM"}

    def run(self, ctx):
        with ctx.phase("structure"):
            raised = raises(lambda: ctx.impl.tensor_parallel.parallelize_transformer(
                build_model("cnn", seed=0), ctx.group))[0]
        ctx.record_value("structure/parallelize_transformer(MnistCNN) raises", raised)

    def expected(self, world_size):
        return {r: {"structure/parallelize_transformer(MnistCNN) raises": "TypeError"}
                for r in range(world_size)}


class EmbeddingPadding(Check):
    """from_serial of a pretrained nn.Embedding with padding_idx, whose padding row is not
    zero (a loaded table keeps what it was trained to), fed ids that include it: the padding
    row's vector is the serial one and gets no gradient."""
    exercise, name = "tensor_parallel", "ParallelEmbedding_padding_idx"
    hints = {"forward": "the output must be the serial embedding's, padding row included: "
                        "from_serial copies the serial table as it is (a pretrained padding "
                        "row need not be zero: zero it only in a fresh layer)",
             "backward/grad weight": "like nn.Embedding, the row of padding_idx gets no gradient: "
                                     "pass padding_idx to F.embedding"}

    @staticmethod
    def pretrained():
        emb = nn.Embedding(VOCAB, HIDDEN, padding_idx=PAD)
        with torch.no_grad():
            emb.weight[PAD].uniform_(0.5, 1.0)
        return emb

    def serial(self):
        return seeded(self.pretrained, 31)

    @staticmethod
    def ids():
        ids = randint(32, VOCAB, 3, 5)
        ids[:, 0] = PAD
        return ids

    def run(self, ctx):
        layer = ctx.impl.tensor_parallel.ParallelEmbedding.from_serial(
            self.serial().to(ctx.device), group=ctx.group)
        with ctx.phase("forward"):
            out = layer(self.ids().to(ctx.device))
        ctx.record("forward/output", out)
        with ctx.phase("backward"):
            out.backward(ctx.to(randn(33, *out.shape)))
        ctx.record("backward/grad weight shard", layer.weight.grad)

    def expected(self, world_size):
        emb = self.serial()
        out = emb(self.ids())
        out.backward(randn(33, *out.shape))
        return {r: {"forward/output": out.detach(),
                    "backward/grad weight shard": emb.weight.grad.chunk(world_size, dim=1)[r]}
                for r in range(world_size)}

    def comm_rules(self, world_size):
        if world_size == 1:
            return []
        return [CommRule("forward", "all_gather", 1, "forward: one all-gather of the looked-up "
                                                     "slices"),
                CommRule("backward", "*", 0, "backward needs no communication: all_gather's "
                                             "backward keeps this rank's slice")]
