"""FullyShardedDataParallel gathers each unit with dist.all_gather into a list of N views of
the gathered vector (one per rank's shard) instead of all_gather_into_tensor."""
EDITS = {
    "_Unit.post_gather": [
        (r'''        self.handle = dist.all_gather_into_tensor(self.full.data, self.shard.detach(),
                                                  group=self.owner.group, async_op=True)
''',
         r'''        self.handle = dist.all_gather(list(self.full.data.chunk(self.owner.world)),
                                      self.shard.detach(), group=self.owner.group,
                                      async_op=True)
'''),
    ],
    "FullyShardedDataParallel.full_state_dict": [
        (r'''            full = unit.shard.new_empty(unit.shard.numel() * self.world)
            dist.all_gather_into_tensor(full, unit.shard.detach(), group=self.group)
''',
         r'''            parts = [torch.empty_like(unit.shard) for _ in range(self.world)]
            dist.all_gather(parts, unit.shard.detach(), group=self.group)
            full = torch.cat(parts)
'''),
    ],
}
