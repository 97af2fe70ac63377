r"""FullyShardedDataParallel takes the shard of its GLOBAL rank (dist.get_rank()) where the
group rank is meant: right on the whole world, wrong in a group of ranks {1, 3}.

EXPECT: sharding\.FullyShardedDataParallel_subgroups .*rule 'Group'
CLASS: subgroup
RULE: Group
WORLD_SIZES: 4
ONLY: FullyShardedDataParallel_subgroups
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "FullyShardedDataParallel.__init__": [
        (r'''        self.module, self.group = module, group
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
''',
         r'''        self.module, self.group = module, group
        self.world, self.rank = dist.get_world_size(group), dist.get_rank()
'''),
    ],
}
