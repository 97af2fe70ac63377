"""Duplication's backward forgets the all-reduce.

EXPECT: Duplication.*backward/grad input
CLASS: forgotten-collective
WORLD_SIZES: 2
"""

# The bug, as edits of the reference solution (solutions/comm.py):
EDITS = {
    "Duplication.backward": [
        (r'''        dist.all_reduce(grad, group=ctx.group)
''',
         r''''''),
    ],
}
