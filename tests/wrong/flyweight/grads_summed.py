"""Sums the ranks' gradient contributions where DDP averages them (no division by N).

EXPECT: backward/grad weight shard .*the MEAN over ranks
SAYS: value.scaled
CLASS: values
WORLD_SIZES: 2
ONLY: Linear
RULE: Results

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
BASE = "simple"
EDITS = {
    "FlyweightWrapper._rotating_backward": [
        (r'''        own = sending.wait() / world  # every rank's contribution to shard r: DDP's mean
''',
         r'''        own = sending.wait()  # every rank's contribution to shard r
'''),
    ],
}
