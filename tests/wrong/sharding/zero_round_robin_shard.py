r"""ShardedOptimizer deals the elements round-robin (rank r owns elements r, r + N, r + 2N,
... of each padded parameter) instead of the contiguous block r: the training is right, the
layout is not the one the stub states.

EXPECT: sharding\.ShardedOptimizer .*step1 sgd/gradient shard max abs error.*rule 'Layout'
CLASS: values
RULE: Layout
WORLD_SIZES: 2
ONLY: ShardedOptimizer
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "ShardedOptimizer.__init__": [
        (r'''        self.shards = [own_chunk(p.detach().reshape(-1), self.rank, self.world)
                       .requires_grad_(p.requires_grad) for p in self.params]
''',
         r'''        self.shards = [padded(p.detach().reshape(-1), self.world)[self.rank::self.world]
                       .clone().requires_grad_(p.requires_grad) for p in self.params]
'''),
    ],
    "ShardedOptimizer.step": [
        (r'''            dist.reduce_scatter_tensor(grad, padded(p.grad.reshape(-1), self.world),
                                       group=self.group)
''',
         r'''            dealt = padded(p.grad.reshape(-1), self.world).view(-1, self.world).t()
            dist.reduce_scatter_tensor(grad, dealt.contiguous().view(-1), group=self.group)
'''),
        (r'''            p.copy_(full[:p.numel()].view_as(p))
''',
         r'''            p.copy_(full.view(self.world, -1).t().reshape(-1)[:p.numel()].view_as(p))
'''),
    ],
}
