r"""The constructor broadcasts with async_op=True and never waits on the works: the ranks may start from their own weights.

EXPECT: \[E1\.2\] data_parallel\.DataParallel .*init/.*hint: after the constructor the ranks' weights differ.*wait\(\) on each work
CLASS: values
WORLD_SIZES: 2
ONLY: DataParallel

A wrong implementation: solutions/data_parallel.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
REPLACE = [
    (r'''                dist.broadcast(t, src=src, group=group)
''',
     r'''                dist.broadcast(t, src=src, group=group, async_op=True)  # never waited
'''),
]
