"""average_gradients sums the gradients and forgets to divide by the world size.

EXPECT: average_gradients.*x the expected value
CLASS: values
WORLD_SIZES: 2
RULE: Results
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "average_gradients": [
        (r'''            p.grad /= world
''',
         r''''''),
    ],
}
