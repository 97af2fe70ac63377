r"""ShardedOptimizer.step reads every parameter's .grad, a frozen one's (None) too.

EXPECT: sharding\.ShardedOptimizer .*'NoneType' object has no attribute.*hint: .*FROZEN parameter \(requires_grad=False\), whose \.grad stays None
CLASS: frozen
RULE: Frozen and unused
WORLD_SIZES: 2
ONLY: ShardedOptimizer
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "ShardedOptimizer.step": [
        (r'''            if p.grad is None:
                shard.grad = None
                continue
            grad = shard.new_empty(shard.numel())
''',
         r'''            grad = shard.new_empty(shard.numel())
'''),
    ],
}
