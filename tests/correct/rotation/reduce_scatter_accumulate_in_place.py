"""ring_reduce_scatter adds each rank's chunk in place into the partial sum it received."""
REPLACE = [
    ("""        partial = rotate(partial, "clockwise", group) + chunks[(rank - 1 - k) % world]""",
     """        partial = rotate(partial, "clockwise", group)
        partial += chunks[(rank - 1 - k) % world]"""),
]
