r"""Rotates the gradient accumulators N-1 times (like the weights): each ends next to its owner.

EXPECT: flyweight\.Linear .*backward/grad weight shard max abs error.*after N moves \(one more than the weights\)
CLASS: values
WORLD_SIZES: 2
ONLY: Linear

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
BASE = "simple"
EDITS = {
    "FlyweightWrapper._rotating_backward": [
        (r'''            sending = rotation.rotate_async(acc, "counterclockwise", self.group,
                                            recv_shape=(self._numel((s + 1) % world),))
            del acc
''',
         r'''            sending = None
            if k < world - 1:
                sending = rotation.rotate_async(acc, "counterclockwise", self.group,
                                                recv_shape=(self._numel((s + 1) % world),))
'''),
        (r'''        own = sending.wait() / world  # every rank's contribution to shard r: DDP's mean
''',
         r'''        own = acc / world  # every rank's contribution: DDP's mean
'''),
    ],
}
