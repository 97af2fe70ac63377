r"""1F1B's warm-up is N - r - 1 forwards even when there are fewer micro-batches: right with 2 ranks, fails at 4.

EXPECT: world size 4, phase M=2: rank 0 raised IndexError.*rule 'Schedule': with fewer micro-batches than stages the warm-up is
CLASS: 3-4-ranks
WORLD_SIZES: 4
ONLY: one_f_one_b

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "one_f_one_b": [
        (r'''    warmup = min(world - rank - 1, m)
''',
         r'''    warmup = world - rank - 1
'''),
    ],
}
