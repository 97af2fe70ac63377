"""ring_reduce_scatter adds each rank's chunk in place into the partial sum it received."""
EDITS = {
    "ring_reduce_scatter": [
        (r'''        partial = rotate(partial, "clockwise", group) + chunks[(rank - 1 - k) % world]''',
         r'''        partial = rotate(partial, "clockwise", group)
        partial += chunks[(rank - 1 - k) % world]'''),
    ],
}
