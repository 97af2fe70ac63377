"""Forward keeps the online softmax's running max m, running sum l and the unnormalised sum of
exp(s - m) v, rescaling them as each block comes, and divides once at the end (no merge of
normalised results: another valid order of the same sums)."""
EDITS = {
    "ring_attention_forward": [
        (r'''    half = q.shape[-2] // 2
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
''',
         r'''    half, scale = q.shape[-2] // 2, q.shape[-1] ** -0.5
    m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device)  # running max
    total = torch.zeros_like(m)                                  # sum of exp(s - m)
    acc = torch.zeros_like(q)                                    # sum of exp(s - m) v
    for i in range(world):
        s = (rank - i) % world
        incoming = None
        if i < world - 1:
            incoming = (rotate_async(k, "clockwise", group), rotate_async(v, "clockwise", group))
        rows, keys, mask = slice(None), slice(None), None
        if causal and s == rank:
            mask = _own_mask(q)
        elif causal and s < rank:
            keys = slice(0, half)
        elif causal:
            rows = slice(half, None)
        scores = (q[..., rows, :] @ k[..., keys, :].transpose(-2, -1)) * scale
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        new_m = torch.maximum(m[..., rows], scores.amax(-1))
        safe = new_m.masked_fill(new_m == float("-inf"), 0.0)
        p = torch.exp(scores - safe.unsqueeze(-1))
        rescale = torch.exp(m[..., rows] - safe)                 # what was summed, to the new max
        total[..., rows] = total[..., rows] * rescale + p.sum(-1)
        acc[..., rows, :] = acc[..., rows, :] * rescale.unsqueeze(-1) + p @ v[..., keys, :]
        m[..., rows] = new_m
        if incoming is not None:
            k, v = incoming[0].wait(), incoming[1].wait()
    return acc / total.unsqueeze(-1), m + torch.log(total)
'''),
    ],
}
