r"""1F1B's warm-up counts in world ranks, not the group's.

EXPECT: subgroup.*rank 0, M=4/forwards and backwards, in order is 'F0 F1 F2 B0 F3 B1 B2 B3', expected 'F0 F1 B0 F2 B1 F3 B2 B3'
CLASS: subgroup
WORLD_SIZES: 3
ONLY: subgroup

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "one_f_one_b": [
        (r'''    warmup = min(world - rank - 1, m)
''',
         r'''    warmup = min(dist.get_world_size() - dist.get_rank() - 1, m)
'''),
    ],
}
