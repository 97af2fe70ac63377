"""DataParallel's hook all-reduces but never divides: gradients are N times too large.

EXPECT: DataParallel.*backward/grad.*x the expected value
CLASS: values
WORLD_SIZES: 3
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "DataParallel._on_grad": [
        (r'''        p.grad /= dist.get_world_size(self.group)
''',
         r''''''),
    ],
}
