"""AllReduce averages the partial sums instead of adding them.

EXPECT: AllReduce.*forward/output.*x the expected value
CLASS: values
WORLD_SIZES: 2
"""

# The bug, as edits of the reference solution (solutions/comm.py):
EDITS = {
    "AllReduce.forward": [
        (r'''        return out
''',
         r'''        return out / dist.get_world_size(group)
'''),
    ],
}
