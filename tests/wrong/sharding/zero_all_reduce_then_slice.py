r"""ShardedOptimizer.step all-reduces each padded gradient and keeps its own slice of the sum:
the shards' gradients are right, but every rank received the whole gradient (an all-reduce
is a reduce-scatter AND an all-gather), which ZeRO-1 exists to avoid.

EXPECT: sharding\.ShardedOptimizer .*all_reduce call\(s\), expected exactly 0.*rule 'Communication': no all-reduce
CLASS: traffic
RULE: Communication
WORLD_SIZES: 2
ONLY: ShardedOptimizer
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "ShardedOptimizer.step": [
        (r'''            grad = shard.new_empty(shard.numel())
            dist.reduce_scatter_tensor(grad, padded(p.grad.reshape(-1), self.world),
                                       group=self.group)
            shard.grad = grad.div_(self.world)
''',
         r'''            total = padded(p.grad.reshape(-1), self.world).clone()
            dist.all_reduce(total, group=self.group)
            size = shard.numel()
            shard.grad = total[self.rank * size:(self.rank + 1) * size].div(self.world)
'''),
    ],
}
