r"""zigzag_shard cuts with torch.tensor_split, which accepts any length, and never raises: a
length 2N does not divide gives ranks shards of different sizes.

EXPECT: raises/a length 2N does not divide raises is 'nothing', expected 'ValueError'.*rule 'Raises'
CLASS: values
WORLD_SIZES: 2
ONLY: zigzag
RULE: Raises
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
REPLACE = [
    (r'''    _check_divisible(x.shape[dim], world)
    chunks = x.chunk(2 * world, dim=dim)
''',
     r'''    chunks = x.tensor_split(2 * world, dim=dim)
'''),
]
