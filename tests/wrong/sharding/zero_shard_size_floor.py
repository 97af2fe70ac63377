r"""ShardedOptimizer's shard size is numel // N (floor), not ceil(numel / N): where N does not
divide a parameter, the gathered shards are one element per rank short of it.

EXPECT: sharding\.ShardedOptimizer .*raised RuntimeError: shape .* is invalid for input of size.*hint: sizes that disagree: rule 'Layout'.*S = ceil\(numel / N\)
CLASS: uneven
WORLD_SIZES: 2
ONLY: ShardedOptimizer
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "shard_size": [
        (r'''    return -(-numel // world_size)
''',
         r'''    return max(numel // world_size, 1)
'''),
    ],
}
