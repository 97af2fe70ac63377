r"""ShardedOptimizer takes a frozen parameter's missing gradient as zeros: it reduce-scatters
them, steps the shard and copies it back. Momentum and Adam from zero state leave it as it
was; weight decay moves it.

EXPECT: sharding\.ShardedOptimizer_weight_decay .*step1 sgd_wd/2\.bias \(frozen: requires_grad=False\) max abs error.*hint: rule 'Frozen and unused': a parameter whose \.grad is None \(frozen\) is never stepped
CLASS: frozen
WORLD_SIZES: 2
ONLY: ShardedOptimizer ShardedOptimizer_weight_decay
"""

# The bug, as edits of the reference solution (solutions/sharding.py), as the student wrote it:
EDITS = {
    "ShardedOptimizer.step": [
        (r'''            if p.grad is None:
                shard.grad = None
                continue
            grad = shard.new_empty(shard.numel())
            dist.reduce_scatter_tensor(grad, padded(p.grad.reshape(-1), self.world),
''',
         r'''            given = p.grad if p.grad is not None else torch.zeros_like(p)
            grad = shard.new_empty(shard.numel())
            dist.reduce_scatter_tensor(grad, padded(given.reshape(-1), self.world),
'''),
    ],
}
