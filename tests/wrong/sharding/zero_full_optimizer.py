r"""ShardedOptimizer reduce-scatters the gradients, then all-gathers the averaged shards back
into every full gradient and steps an inner optimizer built on the FULL parameters: the
weights are right, but every rank keeps the whole optimizer state (no ZeRO at all).

EXPECT: sharding\.ShardedOptimizer .*memory/optimizer state bytes is \d+, expected at most .*hint: rule 'Memory': self\.optimizer must be built on this rank's shards only
CLASS: memory
RULE: Memory
WORLD_SIZES: 2
ONLY: ShardedOptimizer
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "ShardedOptimizer.__init__": [
        (r'''        self.optimizer = optimizer_cls(self.shards, **optimizer_kwargs)
''',
         r'''        self.optimizer = optimizer_cls(self.params, **optimizer_kwargs)
'''),
    ],
    "ShardedOptimizer.step": [
        (r'''        self.optimizer.step()
        for p, shard in zip(self.params, self.shards):
            full = shard.new_empty(shard.numel() * self.world)
            dist.all_gather_into_tensor(full, shard.detach(), group=self.group)
            p.copy_(full[:p.numel()].view_as(p))
''',
         r'''        for p, shard in zip(self.params, self.shards):
            if shard.grad is None:                  # frozen: no gradient
                continue
            full = shard.new_empty(shard.numel() * self.world)
            dist.all_gather_into_tensor(full, shard.grad, group=self.group)
            p.grad.copy_(full[:p.numel()].view_as(p))
        self.optimizer.step()
'''),
    ],
}
