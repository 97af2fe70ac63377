r"""ring_reduce_scatter starts the sum with the rank's own chunk: rank r ends with chunk r+1.

EXPECT: ring_reduce_scatter dim=0/output max abs error.*starts the sum of chunk \(r-1\) % N
CLASS: off-by-one
WORLD_SIZES: 2
ONLY: ring_reduce_scatter

A wrong implementation: solutions/rotation.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "ring_reduce_scatter": [
        (r'''    partial = chunks[(rank - 1) % world].clone()
''',
         r'''    partial = chunks[rank].clone()
'''),
        (r'''        partial = rotate(partial, "clockwise", group) + chunks[(rank - 1 - k) % world]
''',
         r'''        partial = rotate(partial, "clockwise", group) + chunks[(rank - k) % world]
'''),
    ],
}
