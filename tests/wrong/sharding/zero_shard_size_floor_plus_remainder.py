r"""The shard size is computed as numel // N + numel % N: ceil(numel / N) for N = 1 and 2,
larger for some sizes at 3 and 4 ranks (35 elements on 3 ranks: 13, not 12).

EXPECT: sharding\.ShardedOptimizer +\(fails at world size 3\).*gradient shard has shape \(\d+,\), expected \(\d+,\).*S = ceil\(P / N\)
CLASS: 3-4-ranks
WORLD_SIZES: 2 3
ONLY: ShardedOptimizer
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "shard_size": [
        (r'''    return -(-numel // world_size)
''',
         r'''    return numel // world_size + numel % world_size
'''),
    ],
}
