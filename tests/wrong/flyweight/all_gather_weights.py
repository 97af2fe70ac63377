r"""Gathers all weight shards with dist.all_gather instead of rotating them.

EXPECT: forward: 1 collective call\(s\), expected exactly 0; seen: all_gather at flyweight\.py:\d+.*the weights travel by rotation only
CLASS: traffic
WORLD_SIZES: 2
ONLY: Linear
RULE: Rotation only

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
BASE = "simple"
EDITS = {
    "FlyweightWrapper._rotating_forward": [
        (r'''        shard, parts, total = self._own_flat(), [None] * world, None
        for i in range(world):
            s = (rank - i) % world
            incoming = None
            if i < world - 1:  # start the transfer BEFORE computing: overlap
                incoming = rotation.rotate_async(shard, "clockwise", self.group,
                                                 recv_shape=(self._numel((s - 1) % world),))
''',
         r'''        parts, total = [None] * world, None
        longest = max(self._numel(s) for s in range(world))
        own = self._own_flat()
        padded = torch.cat([own, own.new_zeros(longest - own.numel())])  # all_gather wants equal sizes
        gathered = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(gathered, padded, group=self.group)
        for s in range(world):
            shard = gathered[s][: self._numel(s)]
'''),
        (r'''            shard = incoming.wait() if incoming is not None else None  # drop the used shard
''',
         r''''''),
    ],
}
