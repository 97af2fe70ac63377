"""Duplication's backward all-reduces on every rank but rank 0: the others wait forever.

EXPECT: Duplication.*(deadlock|left waiting|crashed.*did not match)
CLASS: deadlock
WORLD_SIZES: 2
"""

# The bug, as edits of the reference solution (solutions/comm.py):
EDITS = {
    "Duplication.backward": [
        (r'''        dist.all_reduce(grad, group=ctx.group)
''',
         r'''        if dist.get_rank(ctx.group) != 0:
            dist.all_reduce(grad, group=ctx.group)
'''),
    ],
}
