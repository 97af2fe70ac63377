"""Exercise E3: Megatron-style tensor parallelism (TP) of a transformer.

Notebook: notebooks/04_tensor_parallel.ipynb. Check: `rtp-course check tensor_parallel`.
Tasks (each TODO below says its task; the notebook section of that number teaches it):

    E3.1  section 1: `ColumnParallelLinear`
    E3.2  section 2: `RowParallelLinear`
    E3.3  section 3: `ParallelMLP`
    E3.4  section 4: `ParallelEmbedding`
    E3.5  section 5: `ParallelSelfAttention`
    E3.6  section 6: `parallelize_transformer`

N = dist.get_world_size(group) ranks share every layer; r = dist.get_rank(group)
(the rank WITHIN `group`, not the global rank). All ranks feed the SAME batch.
Each layer keeps one contiguous 1/N slice of the serial weights:

    layer                  rank r holds (serial shapes: W [out, in], table [num, dim])
    ColumnParallelLinear   W rows    [r*out/N, (r+1)*out/N)  -> [out/N, in],  b[r-th slice]
    RowParallelLinear      W columns [r*in/N, (r+1)*in/N)    -> [out, in/N],  b whole (replicated)
    ParallelEmbedding      columns   [r*dim/N, (r+1)*dim/N)  -> [num, dim/N]
    ParallelSelfAttention  heads [r*H/N, (r+1)*H/N): Wq/Wk/Wv rows and Wo columns of those heads
    ParallelMLP            fc1 a column layer, fc2 a row layer

The communication comes from your E2 functions (`from . import comm`):
duplicate (f: forward identity, backward all-reduce), all_reduce (g: forward
all-reduce, backward identity), all_gather and split (along a dim).

Rules your code must follow (the checker tests each one).
Course-wide rules (rtp_course/course/rules.py, notebook 01): 'Device', 'Dtypes'.
* Layout: from_serial(module) builds the layer from an existing serial module,
  slicing it as in the table above; its parameters keep the serial module's device,
  dtype and requires_grad.
* Results: your outputs, input gradients, shard gradients and weights after SGD and
  Adam steps equal serial training's (the slice each rank holds), also when a model
  is called twice before one backward; each call returns a tensor of its own, which
  the next call leaves as it is (no output buffer kept for the next call).
* Frozen and unused: a serial parameter that does not require grad (a frozen
  embedding) stays frozen in its shard and gets no gradient. nn.Parameter(t)
  requires grad whatever t did: pass requires_grad=t.requires_grad.
* Replicated: replicated parameters (row-layer biases, LayerNorms, heads) must get
  the same FULL gradient on every rank. With the same batch everywhere this needs no
  extra communication: think about why.
* Raises: a size that N does not divide raises ValueError naming the layer and the
  sizes: "ColumnParallelLinear: out_features=10 is not divisible by the
  tensor-parallel size 3; pick sizes divisible by 3"; parallelize_transformer
  raises TypeError for a model it does not know.
* Memory: a layer keeps only its shards (and replicated parameters): no copy of the
  serial weights in an attribute, a buffer, a dict, a list or a global, and no
  shard that is a view of a serial weight (nn.Parameter(w[a:b]) keeps all of w
  alive): copy the slice into the new parameter.
* Communication: what each layer's docstring lists under "Communication", and
  nothing more (the E2 comm functions make exactly that).
* Group: use `group` for every collective (pass it to the comm functions) and for
  r and N; its ranks need not be consecutive.
"""
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from rtp_course.models import BertClassifier, TransformerLM
from rtp_course.models.layers import (AttentionWeights, attention_forward, attention_weights,
                                      causal_mask)

from . import comm


class ColumnParallelLinear(nn.Module):
    """y = x W^T + b, W [out, in] split by OUTPUT rows.

    Attributes: weight [out/N, in] = serial W[r*out/N:(r+1)*out/N]; bias [out/N] (the same
    slice) or None; in_features, out_features (the serial sizes); gather_output; group.

    forward(x [..., in]) on every rank (the same x):
        x   = duplicate(x)             forward identity; backward ALL-REDUCE of dx, because x
                                       feeds every rank's shard, so dL/dx = sum over ranks
        y_r = x W_r^T + b_r            [..., out/N], this rank's slice of the serial y
        gather_output=True: y = all_gather(y_r, dim=-1) -> [..., out]
                                       (backward keeps the r-th slice: no communication)
    Communication: backward one all-reduce of x's size; forward one all-gather if gathering.
    A fresh layer (no from_serial) initializes its shard like nn.Linear: U(-1/sqrt(in), 1/sqrt(in)).
    """

    def __init__(self, in_features, out_features, bias=True, gather_output=False, group=None,
                 *, device=None, dtype=None):
        raise NotImplementedError("[E3.1] ColumnParallelLinear.__init__: check out_features % N, then "
                                  "create weight [out/N, in] and bias [out/N] as nn.Parameter")

    @classmethod
    def from_tensors(cls, weight, bias=None, gather_output=False, group=None):
        """Shard a serial weight [out, in] (and bias [out]) that need not sit in an nn.Linear,
        e.g. one third of nn.MultiheadAttention's packed in_proj_weight. Returns the layer."""
        raise NotImplementedError("[E3.1] ColumnParallelLinear.from_tensors: build cls(...) on weight's "
                                  "device/dtype, then copy_ rows [r*out/N, (r+1)*out/N) under no_grad")

    @classmethod
    def from_serial(cls, linear, gather_output=False, group=None):
        """The column-parallel version of an existing nn.Linear `linear`."""
        raise NotImplementedError("[E3.1] ColumnParallelLinear.from_serial: shard linear.weight / linear.bias")

    def forward(self, x):
        raise NotImplementedError("[E3.1] ColumnParallelLinear.forward: comm.duplicate, F.linear with the "
                                  "shard, then comm.all_gather(dim=-1) if gather_output")


class RowParallelLinear(nn.Module):
    """y = x W^T + b, W [out, in] split by INPUT columns.

    Attributes: weight [out, in/N] = serial W[:, r*in/N:(r+1)*in/N]; bias [out], the whole
    serial bias on every rank (replicated) or None; in_features, out_features; input_is_parallel; group.

    forward(x): x is [..., in/N] (the r-th slice, e.g. a column layer's output) when
    input_is_parallel, else the full [..., in] and you take the slice: x_r = split(x, dim=-1)
    (backward all-gathers dx).
        partial_r = x_r W_r^T          [..., out]: x W^T = sum over r of x_r W_r^T
        y = all_reduce(partial_r)      backward: identity (dL/dy is the same on every rank)
        y = y + b                      ONCE, after the reduction: adding b before it counts it N times
    The bias's gradient is then the full serial gradient on every rank: every rank sees the
    same dL/dy. Communication: forward one all-reduce of y's size (+ backward all-gather if split).
    A fresh layer starts with bias = 0 (equal on every rank) and weight U(-1/sqrt(in), 1/sqrt(in)).
    """

    def __init__(self, in_features, out_features, bias=True, input_is_parallel=True, group=None,
                 *, device=None, dtype=None):
        raise NotImplementedError("[E3.2] RowParallelLinear.__init__: check in_features % N, then create "
                                  "weight [out, in/N] and a replicated bias [out]")

    @classmethod
    def from_tensors(cls, weight, bias=None, input_is_parallel=True, group=None):
        """Shard a serial weight [out, in] by columns; copy the bias [out] whole."""
        raise NotImplementedError("[E3.2] RowParallelLinear.from_tensors: copy_ columns "
                                  "[r*in/N, (r+1)*in/N) of weight, and all of bias")

    @classmethod
    def from_serial(cls, linear, input_is_parallel=True, group=None):
        """The row-parallel version of an existing nn.Linear `linear`."""
        raise NotImplementedError("[E3.2] RowParallelLinear.from_serial: shard linear.weight, copy linear.bias")

    def forward(self, x):
        raise NotImplementedError("[E3.2] RowParallelLinear.forward: (comm.split), F.linear WITHOUT bias, "
                                  "comm.all_reduce, then + bias")


class ParallelMLP(nn.Module):
    """fc2(act(fc1(x))) as the Megatron column/row pair.

    Attributes: fc1 = ColumnParallelLinear(in, hidden, gather_output=False), act, fc2 =
    RowParallelLinear(hidden, out, input_is_parallel=True).

        x [..., in] -> fc1 -> h_r [..., hidden/N] -> act (elementwise: works on the slice)
                    -> fc2 -> partial [..., out] -> all-reduce -> + b2 -> y [..., out]
    The hidden activation never leaves its rank: exactly ONE all-reduce in forward (fc2)
    and ONE in backward (fc1's duplicate). No communication between fc1 and fc2.
    ValueError if N does not divide hidden_features ("ParallelMLP: hidden_features=...").
    """

    def __init__(self, in_features, hidden_features, out_features=None, activation=None,
                 bias=True, group=None, *, device=None, dtype=None):
        raise NotImplementedError("[E3.3] ParallelMLP.__init__: fc1 column (no gather), act "
                                  "(default nn.GELU()), fc2 row (input_is_parallel); out defaults to in")

    @classmethod
    def from_linears(cls, fc1, fc2, activation=None, group=None):
        """Shard a serial pair fc2(activation(fc1(x))) of nn.Linear layers (e.g. the LM's
        linear1 / ReLU / linear2). `activation` is an elementwise module or function."""
        raise NotImplementedError("[E3.3] ParallelMLP.from_linears: ColumnParallelLinear.from_serial(fc1), "
                                  "RowParallelLinear.from_serial(fc2)")

    @classmethod
    def from_serial(cls, ff, group=None):
        """Shard the course's FeedForward (ff.fc1, ff.act, ff.fc2)."""
        raise NotImplementedError("[E3.3] ParallelMLP.from_serial: from_linears(ff.fc1, ff.fc2, ff.act, group)")

    def forward(self, x):
        raise NotImplementedError("[E3.3] ParallelMLP.forward: fc2(act(fc1(x)))")


class ParallelEmbedding(nn.Module):
    """An embedding table [num, dim] split by COLUMNS.

    Attributes: weight [num, dim/N] = serial table[:, r*dim/N:(r+1)*dim/N]; num_embeddings,
    embedding_dim (serial sizes); padding_idx; group.

    forward(ids [...] integers, the same on every rank):
        e_r = F.embedding(ids, weight)     [..., dim/N]: the r-th slice of every looked-up vector
        e   = all_gather(e_r, dim=-1)      [..., dim], the full serial output on every rank
    Backward: all_gather's backward keeps the r-th slice of de (no communication); ids need
    no gradient. Communication: forward one all-gather.
    A fresh layer initializes its shard N(0, 1) like nn.Embedding, the padding_idx row
    (if any) at zero; like nn.Embedding, that row gets no gradient (F.embedding's padding_idx).
    """

    def __init__(self, num_embeddings, embedding_dim, group=None, *, padding_idx=None,
                 device=None, dtype=None):
        raise NotImplementedError("[E3.4] ParallelEmbedding.__init__: check embedding_dim % N, create "
                                  "weight [num, dim/N]")

    @classmethod
    def from_serial(cls, embedding, group=None):
        """The column-split version of an existing nn.Embedding (padding_idx kept)."""
        raise NotImplementedError("[E3.4] ParallelEmbedding.from_serial: copy_ columns [r*dim/N, (r+1)*dim/N)")

    def forward(self, ids):
        raise NotImplementedError("[E3.4] ParallelEmbedding.forward: F.embedding with the shard, then "
                                  "comm.all_gather(dim=-1)")


class ParallelSelfAttention(nn.Module):
    """Multi-head self-attention with the HEADS split.

    H heads of d = E/H features; rank r owns heads [r*H/N, (r+1)*H/N), which are the rows
    [r*E/N, (r+1)*E/N) of Wq, Wk, Wv (head h is rows [h*d, (h+1)*d)) and the same columns of Wo.
    Attributes: q_proj, k_proj, v_proj (ColumnParallelLinear, no gather), out_proj
    (RowParallelLinear, input parallel); num_heads (H), local_heads (H/N), head_dim (d);
    causal; group.

    forward, x [B, S, E] the same on every rank:
        x = duplicate(x)                              backward: all-reduce of dx (ONE, shared by q, k, v)
        q, k, v = x W_{q,k,v,r}^T + b_r               [B, S, E/N] -> [B, H/N, S, d]
        A = softmax(q k^T / sqrt(d))                  d = E/H, the per-head dim (NOT E/N), causal
                                                      mask if causal: key j > query i is hidden
        partial = concat_heads(A v) W_{o,r}^T         [B, S, E]: this rank's heads' share
        y = all_reduce(partial) + b_o                 b_o once, after the reduction
    Communication: one all-reduce forward, one backward. Hint: attention_forward(x, weights)
    from rtp_course.models.layers computes "partial" from an AttentionWeights holding your
    shards (wo = your Wo columns, bo = None, num_heads = H/N): read its docstring.

    Call it like the module it replaces (parallelize_transformer swaps them in place):
    from a SelfAttention: forward(x) -> y. From an nn.MultiheadAttention: its inputs are
    [B, S, E] if it has batch_first=True, else [S, B, E] (its default: read it from the module),
    TransformerLM calls self_attn(x, x, x, attn_mask=causal_mask, need_weights=False)[0], and
    you return (y, None). Only self-attention (key = value = query) and the causal mask are
    needed: apply it when the module was marked causal, when is_causal=True, and when the
    call passes it as attn_mask (a module not marked causal may be called with it).
    ValueError if N does not divide num_heads ("ParallelSelfAttention: num_heads=...").
    """

    def __init__(self, hidden_dim, num_heads, bias=True, causal=False, group=None, *,
                 batch_first=True, tuple_output=False, device=None, dtype=None):
        raise NotImplementedError("[E3.5] ParallelSelfAttention.__init__: check num_heads % N; q/k/v "
                                  "ColumnParallelLinear(E, E), out_proj RowParallelLinear(E, E)")

    @classmethod
    def from_serial(cls, module, group=None):
        """Shard a course SelfAttention or an nn.MultiheadAttention (packed q/k/v weights)."""
        raise NotImplementedError("[E3.5] ParallelSelfAttention.from_serial: w = attention_weights(module) "
                                  "gives wq..bo for both kinds; ColumnParallelLinear.from_tensors(w.wq, "
                                  "w.bq, ...), RowParallelLinear.from_tensors(w.wo, w.bo, ...)")

    def forward(self, query, key=None, value=None, attn_mask=None, key_padding_mask=None,
                need_weights=False, is_causal=False):
        raise NotImplementedError("[E3.5] ParallelSelfAttention.forward: duplicate, local attention of "
                                  "your H/N heads (scale 1/sqrt(head_dim)), all_reduce, + out bias")


def parallelize_transformer(model, group=None):
    """Make a course BertClassifier or TransformerLM tensor-parallel, in place; return it.

    Notebook 04, section 6. Replace, using each layer's from_serial:
      BertClassifier: tok_emb, pos_emb -> ParallelEmbedding; blocks[i].attn (SelfAttention)
        -> ParallelSelfAttention; blocks[i].mlp (FeedForward) -> ParallelMLP.
      TransformerLM: embedding -> ParallelEmbedding; layers[i].self_attn
        (nn.MultiheadAttention) -> ParallelSelfAttention; layers[i].linear1 / linear2 ->
        ColumnParallelLinear (no gather) / RowParallelLinear (input parallel): DecoderLayer
        calls them directly with ReLU in between, so the pair stays inline.
    Keep LayerNorms, BertClassifier.head and TransformerLM.decoder serial (replicated):
    every rank computes the full logits; their gradients are the same on every rank.
    Every rank must pass the same serial model (same seed) and then the same batches.
    TypeError for any other model.
    """
    raise NotImplementedError("[E3.6] parallelize_transformer: setattr each submodule to its parallel "
                              "version, e.g. block.attn = ParallelSelfAttention.from_serial(block.attn, group)")
