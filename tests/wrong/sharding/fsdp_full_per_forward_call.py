r"""FSDP makes a new `full` leaf (with its own post-accumulate-grad hook) at every forward call
that finds the unit freed: two forwards before one backward give a unit two `full` tensors,
each reduce-scattered, so backward reduce-scatters more than once per unit.

EXPECT: FullyShardedDataParallel_accumulated .*reduce_scatter call\(s\), expected between 1 and 2.*reduce-scatters each unit's full gradient once
CLASS: traffic per-call-state
WORLD_SIZES: 2
ONLY: FullyShardedDataParallel_accumulated
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "_Unit._before_forward": [
        (r'''    def _before_forward(self, module, args):
        self.wait_gathered()''',
         r'''    def _before_forward(self, module, args):
        if self.handle is None and not self.ready:
            self.full = self.shard.new_empty(self.shard.numel() * self.owner.world)
            self.full.untyped_storage().resize_(0)
            self.full.requires_grad_(True)
            self.full.register_post_accumulate_grad_hook(self._after_backward)
        self.wait_gathered()'''),
    ],
}
