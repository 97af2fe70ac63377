"""Causal attention masks every whole block by the tokens' global positions (q_pos >= k_pos)
instead of taking the half that counts: twice the work off the diagonal, the same results."""
EDITS = {
    "_own_mask": [
        (r'''def _own_mask(q):''',
         r'''def _positions(rank, world, n, device):
    """Sequence positions of the n tokens of rank `rank`: its zig-zag chunks."""
    c = n // 2
    first = torch.arange(rank * c, (rank + 1) * c, device=device)
    return torch.cat([first, first + (2 * world - 1 - 2 * rank) * c])


def _mask(rank, s, world, n, device):
    """Which of rank s's keys each of this rank's queries may see."""
    return _positions(rank, world, n, device)[:, None] >= _positions(s, world, n, device)[None, :]


def _own_mask(q):'''),
    ],
    "ring_attention_forward": [
        (r'''        if not causal:
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
''',
         r'''        mask = _mask(rank, s, world, q.shape[-2], q.device) if causal else None
        out, lse = merge_blocks(out, lse, *block_attention(q, k, v, mask))
'''),
    ],
    "ring_attention_backward": [
        (r'''        if not causal or s == rank:
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
''',
         r'''        mask = _mask(rank, s, world, q.shape[-2], q.device) if causal else None
        gq, gk, gv = _block_grads(q, k, v, grad_out, lse, delta, mask)
        dq += gq
        dk_s += gk
        dv_s += gv
'''),
    ],
}
