r"""FSDP skips the reduce-scatter of a unit whose full gradient is zero on this rank ("nothing
to add"): the other ranks wait in a reduce-scatter this rank never makes.

EXPECT: sharding\.FullyShardedDataParallel .*phase step2 backward: deadlock.*collective calls do not match.*never skip a call on one rank because of its data \(a zero gradient
CLASS: deadlock zero-data
WORLD_SIZES: 2
ONLY: FullyShardedDataParallel
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "_Unit._after_backward": [
        (r'''    def _after_backward(self, full):
        grad = self.shard.new_empty(self.shard.numel())
''',
         r'''    def _after_backward(self, full):
        if not full.grad.any():              # a zero gradient adds nothing to the sum
            full.grad = None
            self.free()
            return
        grad = self.shard.new_empty(self.shard.numel())
'''),
    ],
}
