r"""zigzag_shard pairs chunk r with chunk N + r (the r-th of the second half) instead of chunk
2N-1-r: contiguous halves, and rank N-1's queries see far more keys than rank 0's.

EXPECT: zigzag_shard/shard along dim 1 .*rule 'Layout'
CLASS: off-by-one values
WORLD_SIZES: 2
ONLY: zigzag
RULE: Layout
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "zigzag_shard": [
        (r'''    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim=dim)
''',
         r'''    return torch.cat([chunks[rank], chunks[world + rank]], dim=dim)
'''),
    ],
}
