r"""Sharding ignores the rank: every rank copies rank 0's slice [0, size) of each serial weight.

Right with one rank; from two on every rank computes with the same shard.

EXPECT: RowParallelLinear  .*rank 1, structure/weight.*hint: a row layer keeps weight COLUMNS \[r\*in/N
CLASS: values
WORLD_SIZES: 2
ONLY: RowParallelLinear
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "_slice": [
        (r'''    return tensor.detach().narrow(dim, rank * size, size)
''',
         r'''    return tensor.detach().narrow(dim, 0, size)
'''),
    ],
}
