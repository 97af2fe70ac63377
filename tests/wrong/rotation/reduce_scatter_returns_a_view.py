r"""ring_reduce_scatter starts from the chunk itself, not a copy: with one rank it returns a view of the caller's tensor.

EXPECT: FAIL  \[E4\.4\] rotation\.ring_reduce_scatter  \(fails at world size 1\).*returned a new tensor, not the input or a view of it is False.*hint: rule 'New tensors'
CLASS: in-place
WORLD_SIZES: 1
ONLY: ring_reduce_scatter

A wrong implementation: solutions/rotation.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "ring_reduce_scatter": [
        (r'''    partial = chunks[(rank - 1) % world].clone()
''',
         r'''    partial = chunks[(rank - 1) % world]
'''),
    ],
}
