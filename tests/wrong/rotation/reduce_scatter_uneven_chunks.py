r"""ring_reduce_scatter cuts torch.chunk's uneven chunks when N does not divide the size, instead
of refusing: the ranks then send partial sums of different sizes (a crash, or wrong sums).

EXPECT: ring_reduce_scatter .*(uneven size/a size N does not divide raises is '\w+', expected 'ValueError'.*rule 'Raises'|crashed.*another size than the buffer)
CLASS: uneven
WORLD_SIZES: 3
ONLY: ring_reduce_scatter
HIDDEN: no
RULE: Raises
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "ring_reduce_scatter": [
        (r'''    if tensor.shape[dim] % world:
        raise ValueError(f"ring_reduce_scatter: size {tensor.shape[dim]} of dim {dim} is not "
                         f"divisible by the group size {world}")
''',
         r''''''),
    ],
}
