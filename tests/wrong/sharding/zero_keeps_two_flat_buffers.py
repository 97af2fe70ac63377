r"""ShardedOptimizer keeps each step's padded gradients AND its gathered parameters for the
next step (to reuse them): two flat buffers of the parameters' size, where the Memory rule
allows one.

EXPECT: sharding\.ShardedOptimizer .*memory/bytes held besides the parameters.* is \d+, expected at most \d+.*hint: rule 'Memory'
CLASS: memory
WORLD_SIZES: 2
ONLY: ShardedOptimizer
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "ShardedOptimizer.step": [
        (r'''            grad = shard.new_empty(shard.numel())
            dist.reduce_scatter_tensor(grad, padded(p.grad.reshape(-1), self.world),
                                       group=self.group)
''',
         r'''            grad = shard.new_empty(shard.numel())
            self.__dict__.setdefault("sent", {})[id(p)] = padded(p.grad.reshape(-1),
                                                                  self.world).clone()
            dist.reduce_scatter_tensor(grad, self.sent[id(p)], group=self.group)
'''),
        (r'''            full = shard.new_empty(shard.numel() * self.world)
            dist.all_gather_into_tensor(full, shard.detach(), group=self.group)
            p.copy_(full[:p.numel()].view_as(p))
''',
         r'''            full = self.__dict__.setdefault("gathered", {}).setdefault(
                id(p), shard.new_empty(shard.numel() * self.world))
            dist.all_gather_into_tensor(full, shard.detach(), group=self.group)
            p.copy_(full[:p.numel()].view_as(p))
'''),
    ],
}
