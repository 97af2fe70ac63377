"""average_gradients divides by 2, the world size the student tested with.

EXPECT: average_gradients.*world size 3
CLASS: 3-4-ranks
WORLD_SIZES: 2 3
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "average_gradients": [
        (r'''            p.grad /= world
''',
         r'''            p.grad /= 2
'''),
    ],
}
