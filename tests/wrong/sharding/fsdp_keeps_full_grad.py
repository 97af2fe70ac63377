r"""FullyShardedDataParallel reduce-scatters each unit's full gradient but never sets full.grad
to None: the next step's backward ADDS its gradient to the stale one.

EXPECT: a gradient kept from the previous step \(full\.grad.*set full\.grad = None.*rule 'Memory'.*no full gradient
CLASS: memory
WORLD_SIZES: 2
ONLY: FullyShardedDataParallel
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "_Unit._after_backward": [
        (r'''            self.shard.grad += grad
        full.grad = None
''',
         r'''            self.shard.grad += grad
'''),
    ],
}
