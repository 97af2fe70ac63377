r"""Sharding offsets slices by rank * (full // 2), a leftover of a 2-rank prototype: right with 1 and 2 ranks, wrong from 3.

With 3 ranks rank 1 starts at the middle and rank 2 runs past the end.

EXPECT: ColumnParallelLinear  \(fails at world size 3\).*rank 2 raised RuntimeError.*hint: building the layer failed.*r-th of N equal contiguous slices
CLASS: 3-4-ranks
WORLD_SIZES: 2 3
ONLY: ColumnParallelLinear
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "_slice": [
        (r'''    return tensor.detach().narrow(dim, rank * size, size)
''',
         r'''    return tensor.detach().narrow(dim, rank * (tensor.shape[dim] // 2), size)
'''),
    ],
}
