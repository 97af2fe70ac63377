r"""Causal forward exchanges the two off-diagonal cases: the block's first half for s > r, the
second half of the queries for s < r.

EXPECT: ring_attention_causal.*causal forward/output .*it equals what the causal cases s < r and s > r exchanged .*gives.*FIRST half
CLASS: values
WORLD_SIZES: 2
ONLY: ring_attention_causal
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "ring_attention_forward": [
        (r'''        elif s < rank:                                           # its first chunk is before ours
            out, lse = merge_blocks(out, lse, *block_attention(q, k[..., :half, :],
''',
         r'''        elif s > rank:                                           # its first chunk is before ours
            out, lse = merge_blocks(out, lse, *block_attention(q, k[..., :half, :],
'''),
    ],
}
