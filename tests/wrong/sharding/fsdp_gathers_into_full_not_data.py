r"""FullyShardedDataParallel's forward pre-hook all-gathers into `full` itself, not full.data:
at the second step autograd refuses the in-place write into the views it made of `full`.

EXPECT: step2 forward.*Output 0 of Split is a view.*hint: an exception in a forward after the first step.*full\.data
CLASS: values
WORLD_SIZES: 2
ONLY: FullyShardedDataParallel
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "_Unit.post_gather": [
        (r'''        self.handle = dist.all_gather_into_tensor(self.full.data, self.shard.detach(),
''',
         r'''        self.handle = dist.all_gather_into_tensor(self.full, self.shard.detach(),
'''),
    ],
}
