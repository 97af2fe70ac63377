"""ring_reduce_scatter with the partial sums travelling counterclockwise: every chunk still
visits every rank once, so the sums are the same.
"""
EDITS = {
    "ring_reduce_scatter": [
        (r'''    partial = chunks[(rank - 1) % world].clone()
    for k in range(1, world):
        partial = rotate(partial, "clockwise", group) + chunks[(rank - 1 - k) % world]''',
         r'''    partial = chunks[(rank + 1) % world].clone()
    for k in range(1, world):
        partial = rotate(partial, "counterclockwise", group) + chunks[(rank + 1 + k) % world]'''),
    ],
}
