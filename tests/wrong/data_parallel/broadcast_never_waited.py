r"""The constructor broadcasts with async_op=True and never waits on the works: the ranks may start from their own weights, or get rank 0's in the middle of a step (a race: which one shows varies), so the check names the works never waited, whatever the race did.

EXPECT: \[E1\.2\] data_parallel\.DataParallel .*init/works started with async_op=True and never waited is \['broadcast at data_parallel\.py:\d+.*hint: rule 'Communication': wait\(\) on every work
CLASS: values
WORLD_SIZES: 2
ONLY: DataParallel

A wrong implementation: solutions/data_parallel.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "DataParallel.__init__": [
        (r'''                dist.broadcast(t, src=src, group=group)
''',
         r'''                dist.broadcast(t, src=src, group=group, async_op=True)  # never waited
'''),
    ],
}
