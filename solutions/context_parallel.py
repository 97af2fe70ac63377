"""Reference: ring attention (context parallelism) on the rotation primitive of E4.

The sequence is sharded over the N ranks of `group`: each rank holds the queries, keys and
values of its own tokens, [batch, heads, seq_local, head_dim]. Forward on rank r, step
i = 0..N-1: hold the key/value block of rank s = (r - i) % N, start rotating it clockwise
(it goes to r+1, the block of s-1 comes from r-1), attend with it, and merge that block's
partial result into the running one with the log-sum-exp trick; N-1 rotations of k and of v.

Causal attention uses the zig-zag layout: the sequence is cut in 2N chunks and rank r holds
chunks r and 2N-1-r, so every rank has as many unmasked scores as any other. With the block
of rank s in hand: s == r, the causal mask inside the block (the positions of a rank's
tokens increase with their local index: a lower triangle); s < r, the queries see the
block's first chunk only, all of it; s > r, only the queries' second chunk sees the block,
all of it. Each off-diagonal step is half a block of work, on every rank.

Backward on rank r, step k = 0..N-1: hold the block of s = (r + k) % N (k and v now rotate
counterclockwise, from r+1), recompute the probabilities from the saved log-sum-exp, add this
rank's queries' part to dq and to the gradient accumulators of block s, which rotate
counterclockwise too and come back to their owner after N moves (the blocks need N-1).
"""
import torch
import torch.distributed as dist

from .rotation import ring_all_gather, rotate_async


def block_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) v over one block of keys, and the log-sum-exp of each row's
    scores; a row whose keys are all masked gets out 0 and lse -inf."""
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)                       # stable: subtracts the row max
    finite = lse.masked_fill(lse == float("-inf"), 0.0)          # exp(-inf - 0) = 0 on empty rows
    return torch.exp(scores - finite.unsqueeze(-1)) @ v, lse


def merge_blocks(out_a, lse_a, out_b, lse_b):
    """The attention over the keys of both blocks, from each block's (out, lse)."""
    m = torch.maximum(lse_a, lse_b)                              # the running max
    m = m.masked_fill(m == float("-inf"), 0.0)                   # rows neither block reaches
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)        # each block's sum, rescaled to m
    total = w_a + w_b
    lse = m + torch.log(total)                                   # log 0 = -inf: no key at all
    total = total.masked_fill(total == 0, 1.0)
    out = (out_a * w_a.unsqueeze(-1) + out_b * w_b.unsqueeze(-1)) / total.unsqueeze(-1)
    return out, lse


def _own_mask(q):
    """The causal mask of a rank's own block: its tokens' positions grow with the local index."""
    n = q.shape[-2]
    return torch.ones(n, n, dtype=torch.bool, device=q.device).tril()


def ring_attention_forward(q, k, v, causal=False, group=None):
    """(out, lse) of this rank's queries over every rank's keys and values."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if causal and q.shape[-2] % 2:
        raise ValueError(f"causal ring attention needs an even local length (two zig-zag "
                         f"chunks), got {q.shape[-2]}")
    half = q.shape[-2] // 2
    out = torch.zeros_like(q)
    lse = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device)
    for i in range(world):
        s = (rank - i) % world                                   # whose block is in hand
        incoming = None
        if i < world - 1:                                        # start moving it on, THEN compute
            incoming = (rotate_async(k, "clockwise", group), rotate_async(v, "clockwise", group))
        if not causal:
            out, lse = merge_blocks(out, lse, *block_attention(q, k, v))
        elif s == rank:
            out, lse = merge_blocks(out, lse, *block_attention(q, k, v, _own_mask(q)))
        elif s < rank:                                           # its first chunk is before ours
            out, lse = merge_blocks(out, lse, *block_attention(q, k[..., :half, :],
                                                               v[..., :half, :]))
        else:                                                    # only our second chunk sees it
            late, late_lse = merge_blocks(out[..., half:, :], lse[..., half:],
                                          *block_attention(q[..., half:, :], k, v))
            out = torch.cat([out[..., :half, :], late], dim=-2)
            lse = torch.cat([lse[..., :half], late_lse], dim=-1)
        if incoming is not None:
            k, v = incoming[0].wait(), incoming[1].wait()        # the block used is dropped
    return out, lse


def _block_grads(q, k, v, dout, lse, delta, mask=None):
    """This rank's queries' part of (dq, dk, dv) for one block, the probabilities recomputed
    from the forward's log-sum-exp."""
    scale = q.shape[-1] ** -0.5
    scores = (q @ k.transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    p = torch.exp(scores - lse.unsqueeze(-1))
    dv = p.transpose(-2, -1) @ dout
    ds = p * (dout @ v.transpose(-2, -1) - delta.unsqueeze(-1))
    return (ds @ k) * scale, (ds.transpose(-2, -1) @ q) * scale, dv


def ring_attention_backward(grad_out, q, k, v, out, lse, causal=False, group=None):
    """(dq, dk, dv): dq of this rank's queries, dk and dv of this rank's own block."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    half = q.shape[-2] // 2
    delta = (grad_out * out).sum(-1)                             # sum_j P_ij dP_ij
    dq = torch.zeros_like(q)
    sending = None                                               # accumulators in flight
    for step in range(world):
        s = (rank + step) % world                                # blocks come from r+1 now
        incoming = None
        if step < world - 1:
            incoming = (rotate_async(k, "counterclockwise", group),
                        rotate_async(v, "counterclockwise", group))
        dk_s, dv_s = torch.zeros_like(k), torch.zeros_like(v)
        if not causal or s == rank:
            gq, gk, gv = _block_grads(q, k, v, grad_out, lse, delta,
                                      _own_mask(q) if causal else None)
            dq += gq
            dk_s += gk
            dv_s += gv
        elif s < rank:
            gq, gk, gv = _block_grads(q, k[..., :half, :], v[..., :half, :], grad_out, lse, delta)
            dq += gq
            dk_s[..., :half, :] += gk
            dv_s[..., :half, :] += gv
        else:
            gq, gk, gv = _block_grads(q[..., half:, :], k, v, grad_out[..., half:, :],
                                      lse[..., half:], delta[..., half:])
            dq[..., half:, :] += gq
            dk_s += gk
            dv_s += gv
        if sending is not None:                                  # block s's accumulators, from r+1
            dk_s += sending[0].wait()
            dv_s += sending[1].wait()
        sending = (rotate_async(dk_s, "counterclockwise", group),
                   rotate_async(dv_s, "counterclockwise", group))
        if incoming is not None:
            k, v = incoming[0].wait(), incoming[1].wait()
    return dq, sending[0].wait(), sending[1].wait()              # home after N moves


class RingAttention(torch.autograd.Function):
    """Differentiable in q, k and v; saves this rank's own tensors and the log-sum-exp only."""

    @staticmethod
    def forward(ctx, q, k, v, causal, group):
        ctx.causal, ctx.group = causal, group
        out, lse = ring_attention_forward(q, k, v, causal, group)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        grads = ring_attention_backward(grad_out.contiguous(), *ctx.saved_tensors, ctx.causal,
                                        ctx.group)
        return (*grads, None, None)


def ring_attention(q, k, v, causal=False, group=None):
    """Attention of this rank's queries over the whole sequence; differentiable."""
    return RingAttention.apply(q, k, v, causal, group)


def _check_divisible(size, world):
    if size % (2 * world):
        raise ValueError(f"zig-zag sharding cuts the sequence in 2N = {2 * world} chunks: its "
                         f"length {size} is not divisible by {2 * world}")


def zigzag_shard(x, dim, group=None):
    """Chunks r and 2N-1-r of the 2N chunks of the full `x` along `dim`, concatenated."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    _check_divisible(x.shape[dim], world)
    chunks = x.chunk(2 * world, dim=dim)
    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim=dim)


def zigzag_unshard(x_local, dim, group=None):
    """The full tensor, in sequence order, from every rank's zig-zag shard (not differentiable)."""
    world = dist.get_world_size(group)
    pieces = ring_all_gather(x_local, dim=dim, group=group).chunk(2 * world, dim=dim)
    # rank q's shard brought chunks q (piece 2q) and 2N-1-q (piece 2q+1)
    order = [pieces[2 * j] if j < world else pieces[2 * (2 * world - 1 - j) + 1]
             for j in range(2 * world)]
    return torch.cat(order, dim=dim)
