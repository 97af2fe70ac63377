r"""zigzag_shard cuts with torch.tensor_split, which accepts any length, and never raises: a
length 2N does not divide gives ranks shards of different sizes.

EXPECT: raises/the exception zigzag_shard\(x\) raised where 2N does not divide x's length is 'nothing', expected 'ValueError'.*rule 'Raises': zigzag_shard raises ValueError, naming the length and 2N
CLASS: values
WORLD_SIZES: 2
ONLY: zigzag
RULE: Raises
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "zigzag_shard": [
        (r'''    _check_divisible(x.shape[dim], world)
    chunks = x.chunk(2 * world, dim=dim)
''',
         r'''    chunks = x.tensor_split(2 * world, dim=dim)
'''),
    ],
}
