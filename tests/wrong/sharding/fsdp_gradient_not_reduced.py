r"""FullyShardedDataParallel gives each shard its piece of this rank's OWN full gradient: the
reduce-scatter over the ranks (and the mean) is left out, each rank trains on its batch alone.

EXPECT: sharding\.FullyShardedDataParallel .*backward/gradient shard of every unit, in order max abs error.*reduce-scatter the unit's full gradient
CLASS: forgotten-collective values
WORLD_SIZES: 2
ONLY: FullyShardedDataParallel
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "_Unit._after_backward": [
        (r'''        grad = self.shard.new_empty(self.shard.numel())
        dist.reduce_scatter_tensor(grad, full.grad, group=self.owner.group)
        grad.div_(self.owner.world)
''',
         r'''        size = self.shard.numel()
        grad = full.grad[self.owner.rank * size:(self.owner.rank + 1) * size].clone()
'''),
    ],
}
