"""Transformer building blocks shared by the course models.

Everything is batch-first: activations are ``[batch, seq, hidden]``.

Besides the modules, this file holds a *functional* view of self-attention:
``attention_weights(module)`` pulls the projection weights out of either the
course's ``SelfAttention`` or PyTorch's ``nn.MultiheadAttention``, and
``attention_forward(x, weights)`` recomputes the module's output from them.
Tensor-parallel and rotated-tensor-parallel code uses the pair to compute
attention with *some* of the heads (a shard of the weights) without caring
which module the weights came from.
"""
import math
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn


def causal_mask(seq_len: int, device=None) -> torch.Tensor:
    """Boolean ``[seq, seq]`` mask, True where query i must NOT see key j (j > i).

    This is the ``attn_mask`` convention of ``nn.MultiheadAttention``.
    """
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)


class AttentionWeights(NamedTuple):
    """The tensors and settings that define a self-attention layer.

    wq, wk, wv: ``[inner, hidden]``; bq, bk, bv: ``[inner]`` or None;
    wo: ``[hidden, inner]``; bo: ``[hidden]`` or None. ``inner`` is
    ``num_heads * head_dim``: equal to ``hidden`` for a full layer, a fraction of
    it for a tensor-parallel shard that holds only some heads.
    ``batch_first`` says how the *module* takes its input;
    ``attention_forward`` itself always takes ``[batch, seq, hidden]``.
    """
    wq: torch.Tensor
    bq: Optional[torch.Tensor]
    wk: torch.Tensor
    bk: Optional[torch.Tensor]
    wv: torch.Tensor
    bv: Optional[torch.Tensor]
    wo: torch.Tensor
    bo: Optional[torch.Tensor]
    num_heads: int
    batch_first: bool
    causal: bool


def attention_weights(module: nn.Module) -> AttentionWeights:
    """Return the ``AttentionWeights`` of a ``SelfAttention`` or ``nn.MultiheadAttention``.

    The tensors are views of the module's parameters (no copies), so a loss
    computed with ``attention_forward`` sends gradients to the module.
    ``nn.MultiheadAttention`` packs q, k and v in one ``in_proj_weight``
    ``[3*hidden, hidden]``: we split it in three row blocks. It does not know
    whether it is called with a causal mask; the course's models mark it with an
    attribute ``causal = True`` when they do (``TransformerLM`` does).
    """
    if isinstance(module, SelfAttention):
        q, k, v, o = module.q_proj, module.k_proj, module.v_proj, module.out_proj
        return AttentionWeights(q.weight, q.bias, k.weight, k.bias, v.weight, v.bias,
                                o.weight, o.bias, module.num_heads, True, module.causal)
    if isinstance(module, nn.MultiheadAttention):
        if not module._qkv_same_embed_dim:
            raise ValueError("only self-attention with kdim == vdim == embed_dim is supported")
        wq, wk, wv = module.in_proj_weight.chunk(3, dim=0)
        if module.in_proj_bias is not None:
            bq, bk, bv = module.in_proj_bias.chunk(3, dim=0)
        else:
            bq = bk = bv = None
        return AttentionWeights(
            wq, bq, wk, bk, wv, bv, module.out_proj.weight, module.out_proj.bias,
            module.num_heads, module.batch_first, bool(getattr(module, "causal", False)))
    raise TypeError(f"no attention weights in {type(module).__name__}")


def attention_forward(x: torch.Tensor, w: AttentionWeights,
                      need_mask: Optional[bool] = None) -> torch.Tensor:
    """Multi-head self-attention computed from ``w``; ``x`` is ``[B, S, hidden]``.

    need_mask: apply the causal mask; None means ``w.causal``.

        q, k, v = x Wq^T + bq, x Wk^T + bk, x Wv^T + bv      [B, S, inner]
        split the inner dim in num_heads heads of head_dim    [B, H, S, d]
        A = softmax(q k^T / sqrt(d))  (masked: -inf above the diagonal)
        out = concat_heads(A v) Wo^T + bo                      [B, S, hidden]

    ``head_dim`` comes from the weights (``wq.shape[0] // num_heads``), so the
    same function computes a shard holding only some of the heads: its output
    is then a partial sum that the heads' owners add up (row-parallel ``wo``).
    Attention dropout is not applied (the course trains with dropout 0).
    """
    causal = w.causal if need_mask is None else need_mask
    context = attend(F.linear(x, w.wq, w.bq), F.linear(x, w.wk, w.bk), F.linear(x, w.wv, w.bv),
                     w.num_heads, causal)
    return F.linear(context, w.wo, w.bo)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_heads: int,
           causal: bool = False) -> torch.Tensor:
    """The part of attention between the projections: ``[B, S, inner]`` x 3 -> ``[B, S, inner]``."""
    batch, seq, inner = q.shape
    head_dim = inner // num_heads

    def heads(t):  # [B, S, inner] -> [B, H, S, d]
        return t.view(batch, seq, num_heads, head_dim).transpose(1, 2)

    q, k, v = heads(q), heads(k), heads(v)
    scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)   # [B, H, S, S]
    if causal:
        scores = scores.masked_fill(causal_mask(seq, q.device), float("-inf"))
    context = scores.softmax(dim=-1) @ v                      # [B, H, S, d]
    return context.transpose(1, 2).reshape(batch, seq, inner)


class SelfAttention(nn.Module):
    """Multi-head self-attention with separate q/k/v projections: ``[B, S, E] -> [B, S, E]``."""

    def __init__(self, hidden_dim: int, num_heads: int, bias: bool = True, causal: bool = False):
        super().__init__()
        if hidden_dim % num_heads:
            raise ValueError(f"hidden_dim {hidden_dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = hidden_dim // num_heads
        self.causal = causal
        self.q_proj = nn.Linear(hidden_dim, hidden_dim, bias=bias)
        self.k_proj = nn.Linear(hidden_dim, hidden_dim, bias=bias)
        self.v_proj = nn.Linear(hidden_dim, hidden_dim, bias=bias)
        self.out_proj = nn.Linear(hidden_dim, hidden_dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Through the projection modules (not their weights), so a wrapper around a projection
        # (RTP's FlyweightWrapper, a TP layer) is used.
        context = attend(self.q_proj(x), self.k_proj(x), self.v_proj(x), self.num_heads, self.causal)
        return self.out_proj(context)


class FeedForward(nn.Module):
    """Position-wise MLP: ``fc2(gelu(fc1(x)))``, ``[B, S, E] -> [B, S, E]``."""

    def __init__(self, hidden_dim: int, ffn_dim: int, bias: bool = True):
        super().__init__()
        self.fc1 = nn.Linear(hidden_dim, ffn_dim, bias=bias)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(ffn_dim, hidden_dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class EncoderBlock(nn.Module):
    """Pre-LayerNorm transformer block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``."""

    def __init__(self, hidden_dim: int, num_heads: int, ffn_dim: int, causal: bool = False):
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden_dim)
        self.attn = SelfAttention(hidden_dim, num_heads, causal=causal)
        self.ln2 = nn.LayerNorm(hidden_dim)
        self.mlp = FeedForward(hidden_dim, ffn_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))
