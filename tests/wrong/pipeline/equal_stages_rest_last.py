r"""Stages of L // N blocks each, the last stage taking the rest: not the cut the Layout rule states.

EXPECT: rank 1, L=6/\(start, stop\) of stage 1 is \(1, 2\), expected \(1, 3\).*rule 'Layout'
CLASS: values 3-4-ranks
RULE: Layout
WORLD_SIZES: 4
ONLY: stage_layers

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "stage_layers": [
        (r'''    return rank * num_layers // world, (rank + 1) * num_layers // world
''',
         r'''    size = num_layers // world
    return rank * size, (rank + 1) * size if rank < world - 1 else num_layers
'''),
    ],
}
