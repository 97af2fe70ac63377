r"""FullyShardedDataParallel reduce-scatters each unit's gradient (a sum over the ranks) and
forgets to divide by the group's size.

EXPECT: sharding\.FullyShardedDataParallel .*backward/gradient shard of every unit, in order .*each shard's \.grad is its piece of the DDP gradient, the MEAN over the group's ranks
SAYS: value.scaled
CLASS: values
WORLD_SIZES: 2
ONLY: FullyShardedDataParallel
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "_Unit._after_backward": [
        (r'''        dist.reduce_scatter_tensor(grad, full.grad, group=self.owner.group)
        grad.div_(self.owner.world)
''',
         r'''        dist.reduce_scatter_tensor(grad, full.grad, group=self.owner.group)
'''),
    ],
}
