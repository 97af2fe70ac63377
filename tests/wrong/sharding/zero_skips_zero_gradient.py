r"""ShardedOptimizer skips the reduce-scatter of a gradient that is zero on this rank
("nothing to add"): the other ranks wait in a reduce-scatter this rank never makes.

EXPECT: sharding\.ShardedOptimizer .*phase step2 \w+: deadlock.*collective calls do not match.*never skip a call on one rank because of its data \(a zero gradient
CLASS: deadlock zero-data
WORLD_SIZES: 2
ONLY: ShardedOptimizer
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "ShardedOptimizer.step": [
        (r'''            if p.grad is None:
                shard.grad = None
                continue
''',
         r'''            if p.grad is None or not p.grad.any():     # nothing to add to the sum
                shard.grad = None
                continue
'''),
    ],
}
