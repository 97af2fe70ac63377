r"""ShardedOptimizer cuts ONE flat vector of all the parameters in N (FSDP's cut of a unit), not
each parameter on its own: rank r's shard holds other elements, and fewer where the world
size divides the total but not every parameter.

EXPECT: sharding\.ShardedOptimizer .*gradient shard .*it equals what one flat vector of ALL the parameters cut in N \(FSDP's cut of a unit\) gives.*hint: rule 'Layout': ZeRO-1 cuts EACH parameter on its own
CLASS: values
WORLD_SIZES: 2
ONLY: ShardedOptimizer
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "ShardedOptimizer.__init__": [
        (r'''        self.shards = [own_chunk(p.detach().reshape(-1), self.rank, self.world)
                       .requires_grad_(p.requires_grad) for p in self.params]
''',
         r'''        flat = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.shards = [own_chunk(flat, self.rank, self.world).requires_grad_(True)]
'''),
    ],
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
         r'''        shard = self.shards[0]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        grad = shard.new_empty(shard.numel())
        dist.reduce_scatter_tensor(grad, padded(torch.cat([g.reshape(-1) for g in grads]),
                                                self.world), group=self.group)
        shard.grad = grad.div_(self.world)
        self.optimizer.step()
        full = shard.new_empty(shard.numel() * self.world)
        dist.all_gather_into_tensor(full, shard.detach(), group=self.group)
        sizes = [p.numel() for p in self.params]
        for p, part in zip(self.params, full[:sum(sizes)].split(sizes)):
            if p.grad is not None:
                p.copy_(part.view_as(p))
'''),
    ],
}
