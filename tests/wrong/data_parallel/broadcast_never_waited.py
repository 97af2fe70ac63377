r"""The constructor broadcasts with async_op=True and never waits on the works: the ranks may start from their own weights, or get rank 0's in the middle of a step (a race: which one shows varies).

EXPECT: \[E1\.2\] data_parallel\.DataParallel .*(init/.*hint: after the constructor the ranks' weights differ.*wait\(\) on each work|step\d sgd/.*hint: the weights after the optimizer steps are wrong.*every async work .* is waited before its tensor is used)
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
