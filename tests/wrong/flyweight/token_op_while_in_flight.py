"""Computes a token op (new_zeros(1).add_(1)) while the next shard is in flight, then waits
for it before the step's real work with the shard in hand: no transfer is hidden.

EXPECT: forward/compute while the next shard is in flight is False, expected True.*rule 'Overlap'.*not any op
CLASS: overlap
WORLD_SIZES: 2
ONLY: Linear
RULE: Overlap

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
BASE = "simple"
EDITS = {
    "FlyweightWrapper._rotating_forward": [
        (r'''                                                 recv_shape=(self._numel((s - 1) % world),))
            y = self.kind.partial(self.module, inputs, self._unpack(shard, s), s, extra)
''',
         r'''                                                 recv_shape=(self._numel((s - 1) % world),))
            shard.new_zeros(1).add_(1)             # "compute" while the next shard travels
            arrived = incoming.wait() if incoming is not None else None
            y = self.kind.partial(self.module, inputs, self._unpack(shard, s), s, extra)
'''),
        (r'''            shard = incoming.wait() if incoming is not None else None  # drop the used shard
''',
         r'''            shard = arrived
'''),
    ],
}
