r"""Causal attention masks every block with the lower triangle of its LOCAL indices, as if each
block held the same positions as the queries: right on the diagonal block only.

EXPECT: ring_attention_causal.*causal forward/output .*LOCAL indices of every block
CLASS: values
WORLD_SIZES: 2
ONLY: ring_attention_causal
RULE: Results
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
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
         r'''        mask = _own_mask(q) if causal else None                  # query j sees keys j' <= j
        out, lse = merge_blocks(out, lse, *block_attention(q, k, v, mask))
'''),
    ],
}
