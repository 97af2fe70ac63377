"""Reference: Megatron-style tensor parallelism (column/row linears, MLP, embedding, attention).

N = tensor-parallel size = dist.get_world_size(group), r = dist.get_rank(group).
What rank r holds (contiguous slices of the serial weights):

    ColumnParallelLinear   weight rows    [r*out/N, (r+1)*out/N), bias: the same slice
    RowParallelLinear      weight columns [r*in/N, (r+1)*in/N),   bias: full, replicated
    ParallelEmbedding      weight columns [r*dim/N, (r+1)*dim/N)
    ParallelSelfAttention  heads [r*H/N, (r+1)*H/N): q/k/v column shards, out_proj row shard
    ParallelMLP            fc1 column shard, fc2 row shard

Every rank feeds the SAME batch. Replicated parameters (row biases, LayerNorms,
classifier/decoder heads) then receive the same full gradient on every rank and
stay equal after every optimizer step, with no extra communication.
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


def _tp(group):
    return dist.get_world_size(group), dist.get_rank(group)


def _divide(layer, name, value, world):
    if value % world:
        raise ValueError(f"{layer}: {name}={value} is not divisible by the tensor-parallel size "
                         f"{world}; pick sizes divisible by {world}")
    return value // world


def _slice(tensor, dim, world, rank):
    """Rank's contiguous 1/world slice of `tensor` along `dim` (a view)."""
    size = tensor.shape[dim] // world
    return tensor.detach().narrow(dim, rank * size, size)


def _frozen_like(layer, **serial):
    """A serial tensor that does not require grad (a frozen, pretrained table) stays frozen in
    its shard: a fresh nn.Parameter requires grad whatever it was made from."""
    for name, t in serial.items():
        if t is not None:
            getattr(layer, name).requires_grad_(t.requires_grad)
    return layer


def _uniform(shape, fan_in, device, dtype):
    # nn.Linear's default init; fan_in is the SERIAL layer's, not the shard's.
    bound = 1.0 / math.sqrt(fan_in)
    return nn.Parameter(torch.empty(shape, device=device, dtype=dtype).uniform_(-bound, bound))


class ColumnParallelLinear(nn.Module):
    """y = x W^T + b with W [out, in] split by output rows: rank r holds W_r [out/N, in].

    forward: duplicate(x) (backward: all-reduce of dx), y_r = x W_r^T + b_r [..., out/N];
    with gather_output, all-gather y_r along the last dim -> [..., out].
    """

    def __init__(self, in_features, out_features, bias=True, gather_output=False, group=None,
                 *, device=None, dtype=None):
        super().__init__()
        self.tp_size, self.tp_rank = _tp(group)
        local = _divide(type(self).__name__, "out_features", out_features, self.tp_size)
        self.in_features, self.out_features = in_features, out_features
        self.gather_output, self.group = gather_output, group
        self.weight = _uniform((local, in_features), in_features, device, dtype)
        self.bias = _uniform((local,), in_features, device, dtype) if bias else None

    @classmethod
    def from_tensors(cls, weight, bias=None, gather_output=False, group=None):
        """Shard a serial weight [out, in] (and bias [out]) that need not live in an nn.Linear."""
        out_features, in_features = weight.shape
        layer = cls(in_features, out_features, bias is not None, gather_output, group,
                    device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            layer.weight.copy_(_slice(weight, 0, layer.tp_size, layer.tp_rank))
            if bias is not None:
                layer.bias.copy_(_slice(bias, 0, layer.tp_size, layer.tp_rank))
        return _frozen_like(layer, weight=weight, bias=bias)

    @classmethod
    def from_serial(cls, linear, gather_output=False, group=None):
        return cls.from_tensors(linear.weight, linear.bias, gather_output, group)

    def forward(self, x):
        x = comm.duplicate(x, self.group)
        y = F.linear(x, self.weight, self.bias)
        return comm.all_gather(y, dim=-1, group=self.group) if self.gather_output else y


class RowParallelLinear(nn.Module):
    """y = x W^T + b with W [out, in] split by input columns: rank r holds W_r [out, in/N].

    forward: (split x along the last dim unless input_is_parallel), partial
    y_r = x_r W_r^T [..., out], y = all_reduce(y_r), then + b ONCE (b is replicated:
    adding it before the reduction would count it N times).
    A fresh layer starts with b = 0, so b is equal on every rank by construction.
    """

    def __init__(self, in_features, out_features, bias=True, input_is_parallel=True, group=None,
                 *, device=None, dtype=None):
        super().__init__()
        self.tp_size, self.tp_rank = _tp(group)
        local = _divide(type(self).__name__, "in_features", in_features, self.tp_size)
        self.in_features, self.out_features = in_features, out_features
        self.input_is_parallel, self.group = input_is_parallel, group
        self.weight = _uniform((out_features, local), in_features, device, dtype)
        self.bias = (nn.Parameter(torch.zeros(out_features, device=device, dtype=dtype))
                     if bias else None)

    @classmethod
    def from_tensors(cls, weight, bias=None, input_is_parallel=True, group=None):
        """Shard a serial weight [out, in]; the bias [out] is copied whole."""
        out_features, in_features = weight.shape
        layer = cls(in_features, out_features, bias is not None, input_is_parallel, group,
                    device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            layer.weight.copy_(_slice(weight, 1, layer.tp_size, layer.tp_rank))
            if bias is not None:
                layer.bias.copy_(bias.detach())
        return _frozen_like(layer, weight=weight, bias=bias)

    @classmethod
    def from_serial(cls, linear, input_is_parallel=True, group=None):
        return cls.from_tensors(linear.weight, linear.bias, input_is_parallel, group)

    def forward(self, x):
        if not self.input_is_parallel:
            x = comm.split(x, dim=-1, group=self.group)
        y = comm.all_reduce(F.linear(x, self.weight), self.group)
        return y + self.bias if self.bias is not None else y


class ParallelMLP(nn.Module):
    """fc2(act(fc1(x))): fc1 column-parallel (no gather), fc2 row-parallel (input parallel).

    The hidden activation [..., hidden/N] never leaves the rank: one all-reduce in
    forward (fc2) and one in backward (fc1's duplicate). act must be elementwise.
    """

    def __init__(self, in_features, hidden_features, out_features=None, activation=None,
                 bias=True, group=None, *, device=None, dtype=None):
        super().__init__()
        world, _ = _tp(group)
        _divide(type(self).__name__, "hidden_features", hidden_features, world)
        out_features = in_features if out_features is None else out_features
        self.fc1 = ColumnParallelLinear(in_features, hidden_features, bias, False, group,
                                        device=device, dtype=dtype)
        self.act = nn.GELU() if activation is None else activation
        self.fc2 = RowParallelLinear(hidden_features, out_features, bias, True, group,
                                     device=device, dtype=dtype)

    @classmethod
    def from_linears(cls, fc1, fc2, activation=None, group=None):
        """Shard a serial pair fc2(activation(fc1(x))) of nn.Linear layers."""
        world, _ = _tp(group)
        _divide(cls.__name__, "hidden_features", fc1.out_features, world)
        mlp = cls.__new__(cls)
        nn.Module.__init__(mlp)
        mlp.fc1 = ColumnParallelLinear.from_serial(fc1, gather_output=False, group=group)
        mlp.act = nn.GELU() if activation is None else activation
        mlp.fc2 = RowParallelLinear.from_serial(fc2, input_is_parallel=True, group=group)
        return mlp

    @classmethod
    def from_serial(cls, ff, group=None):
        """Shard the course's FeedForward (fc1, act, fc2)."""
        return cls.from_linears(ff.fc1, ff.fc2, ff.act, group)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class ParallelEmbedding(nn.Module):
    """Embedding table [num, dim] split by columns: rank r holds [num, dim/N].

    forward: F.embedding(ids, shard) [..., dim/N], all-gather along the last dim
    -> [..., dim] (backward keeps this rank's slice of the gradient).
    """

    def __init__(self, num_embeddings, embedding_dim, group=None, *, padding_idx=None,
                 device=None, dtype=None):
        super().__init__()
        self.tp_size, self.tp_rank = _tp(group)
        local = _divide(type(self).__name__, "embedding_dim", embedding_dim, self.tp_size)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None and padding_idx < 0:  # nn.Embedding's convention
            padding_idx += num_embeddings
        self.padding_idx, self.group = padding_idx, group
        self.weight = nn.Parameter(torch.randn(num_embeddings, local, device=device, dtype=dtype))
        if padding_idx is not None:
            with torch.no_grad():
                self.weight[padding_idx].zero_()

    @classmethod
    def from_serial(cls, embedding, group=None):
        num, dim = embedding.weight.shape
        layer = cls(num, dim, group, padding_idx=embedding.padding_idx,
                    device=embedding.weight.device, dtype=embedding.weight.dtype)
        with torch.no_grad():
            layer.weight.copy_(_slice(embedding.weight, 1, layer.tp_size, layer.tp_rank))
        return _frozen_like(layer, weight=embedding.weight)

    def forward(self, ids):
        local = F.embedding(ids, self.weight, self.padding_idx)
        return comm.all_gather(local, dim=-1, group=self.group)


def _is_causal_mask(mask, seq):
    expected = causal_mask(seq, mask.device)
    if mask.dtype == torch.bool:
        return torch.equal(mask, expected)
    return torch.equal(torch.isneginf(mask), expected) and not mask[~expected].any()


class ParallelSelfAttention(nn.Module):
    """Multi-head self-attention with the heads split: rank r owns heads [r*H/N, (r+1)*H/N).

    x [B, S, E] -> duplicate -> q/k/v = x W_{q,k,v,r}^T + b_r  [B, S, E/N] = H/N heads of
    d = E/H -> softmax(q k^T / sqrt(d)) v per local head -> partial = ctx_r W_{o,r}^T
    [B, S, E] -> all_reduce -> + b_o once. One all-reduce forward, one backward.
    Call it like the serial module it replaces: x -> y (SelfAttention), or
    (x, x, x, attn_mask=causal or None, need_weights=...) -> (y, None) (nn.MultiheadAttention).
    """

    def __init__(self, hidden_dim, num_heads, bias=True, causal=False, group=None, *,
                 batch_first=True, tuple_output=False, device=None, dtype=None):
        super().__init__()
        self.tp_size, self.tp_rank = _tp(group)
        name = type(self).__name__
        self.local_heads = _divide(name, "num_heads", num_heads, self.tp_size)
        if hidden_dim % num_heads:
            raise ValueError(f"{name}: hidden_dim={hidden_dim} is not divisible by num_heads={num_heads}")
        self.hidden_dim, self.num_heads, self.head_dim = hidden_dim, num_heads, hidden_dim // num_heads
        self.causal, self.batch_first, self.tuple_output, self.group = causal, batch_first, tuple_output, group
        kw = dict(device=device, dtype=dtype)
        self.q_proj = ColumnParallelLinear(hidden_dim, hidden_dim, bias, False, group, **kw)
        self.k_proj = ColumnParallelLinear(hidden_dim, hidden_dim, bias, False, group, **kw)
        self.v_proj = ColumnParallelLinear(hidden_dim, hidden_dim, bias, False, group, **kw)
        self.out_proj = RowParallelLinear(hidden_dim, hidden_dim, bias, True, group, **kw)

    @classmethod
    def from_serial(cls, module, group=None):
        """Shard a course SelfAttention or an nn.MultiheadAttention (packed q/k/v)."""
        w = attention_weights(module)
        layer = cls(w.wq.shape[1], w.num_heads, w.bq is not None, w.causal, group,
                    batch_first=w.batch_first, tuple_output=isinstance(module, nn.MultiheadAttention),
                    device=w.wq.device, dtype=w.wq.dtype)
        layer.q_proj = ColumnParallelLinear.from_tensors(w.wq, w.bq, False, group)
        layer.k_proj = ColumnParallelLinear.from_tensors(w.wk, w.bk, False, group)
        layer.v_proj = ColumnParallelLinear.from_tensors(w.wv, w.bv, False, group)
        layer.out_proj = RowParallelLinear.from_tensors(w.wo, w.bo, True, group)
        return layer

    def forward(self, query, key=None, value=None, attn_mask=None, key_padding_mask=None,
                need_weights=False, is_causal=False):
        if any(t is not None and t is not query for t in (key, value)):
            raise ValueError("ParallelSelfAttention: self-attention only (key and value must be query)")
        if key_padding_mask is not None:
            raise NotImplementedError("ParallelSelfAttention: key_padding_mask is not supported")
        x = query if self.batch_first else query.transpose(0, 1)        # [B, S, E]
        masked = self.causal or is_causal
        if attn_mask is not None:
            if not _is_causal_mask(attn_mask, x.shape[1]):
                raise NotImplementedError("ParallelSelfAttention: only the causal attn_mask is supported")
            masked = True
        x = comm.duplicate(x, self.group)
        q, k, v, o = self.q_proj, self.k_proj, self.v_proj, self.out_proj
        shard = AttentionWeights(q.weight, q.bias, k.weight, k.bias, v.weight, v.bias,
                                 o.weight, None, self.local_heads, True, masked)
        y = comm.all_reduce(attention_forward(x, shard), self.group)   # sum over all heads
        if o.bias is not None:
            y = y + o.bias
        y = y if self.batch_first else y.transpose(0, 1)
        return (y, None) if self.tuple_output else y   # attention maps are not returned


def parallelize_transformer(model, group=None):
    """Turn a course BertClassifier or TransformerLM into a TP model, in place; returns it.

    BertClassifier: tok_emb, pos_emb -> ParallelEmbedding; blocks[i].attn ->
    ParallelSelfAttention; blocks[i].mlp -> ParallelMLP.
    TransformerLM: embedding -> ParallelEmbedding; layers[i].self_attn ->
    ParallelSelfAttention; layers[i].linear1 / linear2 -> ColumnParallelLinear /
    RowParallelLinear (the ParallelMLP pair, kept inline because DecoderLayer calls
    them directly with ReLU between).
    Kept serial and replicated: LayerNorms, the classifier `head`, the LM `decoder`
    (every rank computes the full logits; their gradients are identical on every rank).
    """
    if isinstance(model, BertClassifier):
        model.tok_emb = ParallelEmbedding.from_serial(model.tok_emb, group)
        model.pos_emb = ParallelEmbedding.from_serial(model.pos_emb, group)
        for block in model.blocks:
            block.attn = ParallelSelfAttention.from_serial(block.attn, group)
            block.mlp = ParallelMLP.from_serial(block.mlp, group)
    elif isinstance(model, TransformerLM):
        model.embedding = ParallelEmbedding.from_serial(model.embedding, group)
        for layer in model.layers:
            layer.self_attn = ParallelSelfAttention.from_serial(layer.self_attn, group)
            layer.linear1 = ColumnParallelLinear.from_serial(layer.linear1, False, group)
            layer.linear2 = RowParallelLinear.from_serial(layer.linear2, True, group)
    else:
        raise TypeError(f"parallelize_transformer: expected a BertClassifier or TransformerLM, "
                        f"got {type(model).__name__}")
    return model
