r"""Keeps every received shard in a list (a rank ends up holding all N shards).

EXPECT: forward/received bytes still held after forward is \d+, expected at most 0.*drop each received shard
CLASS: memory
WORLD_SIZES: 2
ONLY: Linear

A wrong implementation: solutions/flyweight.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/flyweight.py):
EDITS = {
    "FlyweightWrapper._rotating_forward": [
        (r'''        shard, parts, total, out = self._own_flat(), [None] * world, None, None
''',
         r'''        shard, parts, total, out = self._own_flat(), [None] * world, None, None
        self.received = []  # keep them around, backward may want them
'''),
        (r'''            shard = incoming.wait() if incoming is not None else None  # drop the used shard
        if out is not None:  # the parts are its columns
''',
         r'''            shard = incoming.wait() if incoming is not None else None
            if shard is not None:
                self.received.append(shard)
        if out is not None:  # the parts are its columns
'''),
    ],
}
