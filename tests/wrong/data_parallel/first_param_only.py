r"""average_gradients returns after the first parameter (a return inside the loop).

EXPECT: average_gradients.*backward/grad 0\.bias
CLASS: forgotten-collective
WORLD_SIZES: 2
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "average_gradients": [
        (r'''            p.grad /= world
''',
         r'''            p.grad /= world
            return
'''),
    ],
}
