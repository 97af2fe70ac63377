"""ShardedOptimizer reduce-scatters each gradient with dist.reduce_scatter over a list of its
N padded chunks, and all-gathers the shards with dist.all_gather into a list."""
EDITS = {
    "ShardedOptimizer.step": [
        (r'''            dist.reduce_scatter_tensor(grad, padded(p.grad.reshape(-1), self.world),
                                       group=self.group)
''',
         r'''            dist.reduce_scatter(grad, list(padded(p.grad.reshape(-1), self.world)
                                           .chunk(self.world)), group=self.group)
'''),
        (r'''            full = shard.new_empty(shard.numel() * self.world)
            dist.all_gather_into_tensor(full, shard.detach(), group=self.group)
            p.copy_(full[:p.numel()].view_as(p))
''',
         r'''            parts = [torch.empty_like(shard) for _ in range(self.world)]
            dist.all_gather(parts, shard.detach(), group=self.group)
            p.copy_(torch.cat(parts)[:p.numel()].view_as(p))
'''),
    ],
}
