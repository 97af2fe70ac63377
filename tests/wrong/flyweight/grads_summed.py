"""Sums the ranks' gradient contributions where DDP averages them (no division by N).

EXPECT: backward/grad weight shard .*every entry is 2 x the expected value.*the MEAN over ranks
WORLD_SIZES: 2
ONLY: Linear

A wrong implementation: solutions/flyweight.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/flyweight.py):
REPLACE = [
    (r'''        own = sending.wait() / world  # every rank's contribution to shard r: DDP's mean
''',
     r'''        own = sending.wait()  # every rank's contribution to shard r
'''),
]
