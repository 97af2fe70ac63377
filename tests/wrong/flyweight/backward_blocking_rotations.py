r"""Backward rotates with blocking calls (rotation.rotate): every weight shard and accumulator
is waited for before anything is computed, so no transfer overlaps compute.

EXPECT: backward/compute while a shard is in flight is False, expected True.*no overlap in backward
CLASS: overlap
WORLD_SIZES: 2
ONLY: Linear

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
BASE = "simple"
EDITS = {
    "FlyweightWrapper._rotating_backward": [
        (r'''            incoming = None
            if k < world - 1:
                incoming = rotation.rotate_async(shard, "counterclockwise", self.group,
                                                 recv_shape=(self._numel((s + 1) % world),))
            d_inputs, d_shard = self._shard_grads(inputs, needs, shard, s, extra, grad_output)''',
         r'''            arrived = None
            if k < world - 1:
                arrived = rotation.rotate(shard, "counterclockwise", self.group,
                                          recv_shape=(self._numel((s + 1) % world),))
            d_inputs, d_shard = self._shard_grads(inputs, needs, shard, s, extra, grad_output)'''),
        (r'''            acc = d_shard if sending is None else sending.wait() + d_shard
            sending = rotation.rotate_async(acc, "counterclockwise", self.group,
                                            recv_shape=(self._numel((s + 1) % world),))
            del acc
            shard = incoming.wait() if incoming is not None else None
        own = sending.wait() / world''',
         r'''            acc = d_shard if sending is None else sending + d_shard
            sending = rotation.rotate(acc, "counterclockwise", self.group,
                                      recv_shape=(self._numel((s + 1) % world),))
            del acc
            shard = arrived
        own = sending / world'''),
    ],
}
