r"""Keeps every received gradient accumulator on the module ("for debugging"): buffers never freed.

EXPECT: backward/received bytes still held after backward is \d+, expected at most 0.*drop each as soon as it is used
CLASS: memory
WORLD_SIZES: 2
ONLY: Linear

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
BASE = "simple"
EDITS = {
    "FlyweightWrapper._rotating_backward": [
        (r'''        shard, sending = self._own_flat(), None
        for k in range(world):
''',
         r'''        shard, sending = self._own_flat(), None
        self.kept_accumulators = []
        for k in range(world):
'''),
        (r'''            acc = d_shard if sending is None else sending.wait() + d_shard
''',
         r'''            if sending is not None:
                self.kept_accumulators.append(sending.wait())
            acc = d_shard if sending is None else self.kept_accumulators[-1] + d_shard
'''),
    ],
}
