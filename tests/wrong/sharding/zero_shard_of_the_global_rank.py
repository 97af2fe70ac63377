r"""ShardedOptimizer cuts the shard of the GLOBAL rank (dist.get_rank()), not the group's: on the
group {0, 2}, global rank 2 cuts past the padded end (an empty shard) and its sizes disagree.

EXPECT: ShardedOptimizer_subgroups .*raised RuntimeError.*hint: sizes that disagree: rule 'Layout'.*the GROUP rank \(dist\.get_rank\(group\)\): a shard index taken from the global rank
CLASS: subgroup
WORLD_SIZES: 4
ONLY: ShardedOptimizer_subgroups
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "ShardedOptimizer.__init__": [
        (r'''        self.shards = [own_chunk(p.detach().reshape(-1), self.rank, self.world)''',
         r'''        self.shards = [own_chunk(p.detach().reshape(-1), dist.get_rank(), self.world)'''),
    ],
}
