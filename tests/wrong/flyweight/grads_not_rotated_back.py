"""Gradient accumulators never travel: each shard's grad is only its owner's contribution / N.

EXPECT: backward/grad weight shard max abs error.*accumulator of shard s travels COUNTERCLOCKWISE
CLASS: forgotten-collective
WORLD_SIZES: 2
ONLY: Linear

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
BASE = "simple"
EDITS = {
    "FlyweightWrapper._rotating_backward": [
        (r'''            # accumulator of shard s: what ranks r+1..r+k added, plus this batch's part
            acc = d_shard if sending is None else sending.wait() + d_shard
            sending = rotation.rotate_async(acc, "counterclockwise", self.group,
                                            recv_shape=(self._numel((s + 1) % world),))
            del acc
''',
         r'''            if s == rank:  # the gradient of my own shard
                mine = d_shard
'''),
        (r'''        own = sending.wait() / world  # every rank's contribution to shard r: DDP's mean
''',
         r'''        own = mine / world  # DDP's mean
'''),
    ],
}
