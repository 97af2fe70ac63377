r"""ShardedOptimizer.step reduce-scatters the gradients (a sum over the ranks) and forgets to
divide by the world size.

EXPECT: sharding\.ShardedOptimizer .*gradient shard .*x the expected value \(2 = the world size: a sum over the ranks where their mean is wanted\).*hint: after step\(\) each shard.s \.grad is ITS piece of the DDP gradient, the MEAN
CLASS: values
RULE: Results
WORLD_SIZES: 2
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "ShardedOptimizer.step": [
        (r'''            shard.grad = grad.div_(self.world)
''',
         r'''            shard.grad = grad
'''),
    ],
}
