"""ShardedOptimizer with one flat buffer for all parameters: one reduce-scatter of every
padded gradient (laid out rank by rank: rank r's pieces together) and one all-gather of every
shard per step, instead of one of each per parameter."""
EDITS = {
    "ShardedOptimizer.step": [
        (r'''        for p, shard in zip(self.params, self.shards):
            if p.grad is None:
                shard.grad = None
                continue
            grad = shard.new_empty(shard.numel())
            dist.reduce_scatter_tensor(grad, padded(p.grad.reshape(-1), self.world),
                                       group=self.group)
            shard.grad = grad.div_(self.world)
        self.optimizer.step()
        for p, shard in zip(self.params, self.shards):
            full = shard.new_empty(shard.numel() * self.world)
            dist.all_gather_into_tensor(full, shard.detach(), group=self.group)
            p.copy_(full[:p.numel()].view_as(p))
''',
         r'''        sizes = [s.numel() for s in self.shards]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        flat = torch.cat([padded(g.reshape(-1), self.world).view(self.world, -1)
                          for g in grads], dim=1)
        mine = flat.new_empty(sum(sizes))
        dist.reduce_scatter_tensor(mine, flat.reshape(-1), group=self.group)
        mine.div_(self.world)
        for p, shard, grad in zip(self.params, self.shards, mine.split(sizes)):
            shard.grad = grad.clone() if p.grad is not None else None
        self.optimizer.step()
        everyone = mine.new_empty(self.world * sum(sizes))
        dist.all_gather_into_tensor(everyone, torch.cat([s.detach() for s in self.shards]),
                                    group=self.group)
        for p, part in zip(self.params, everyone.view(self.world, -1).split(sizes, dim=1)):
            p.copy_(part.reshape(-1)[:p.numel()].view_as(p))
'''),
    ],
}
