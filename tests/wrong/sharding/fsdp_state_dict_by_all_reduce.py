r"""full_state_dict puts the rank's shard into a zero buffer of the unit's padded size and
all-reduces it: the values are right, but each rank sends and receives the whole unit
where an all-gather moves its shard.

EXPECT: FAIL +\[E7\.2\] sharding\.FullyShardedDataParallel .*phase full_state_dict: rank \d, full_state_dict: 0 all_gather call\(s\), expected between 1 and \d+.*hint: rule 'Communication': full_state_dict\(\): one all-gather per unit
CLASS: traffic
WORLD_SIZES: 2
ONLY: FullyShardedDataParallel
"""
EDITS = {
    "FullyShardedDataParallel.full_state_dict": [
        (r'''            full = unit.shard.new_empty(unit.shard.numel() * self.world)
            dist.all_gather_into_tensor(full, unit.shard.detach(), group=self.group)''',
         r'''            n = unit.shard.numel()
            full = unit.shard.new_zeros(n * self.world)
            mine = dist.get_rank(self.group)
            full[mine * n:(mine + 1) * n] = unit.shard.detach()
            dist.all_reduce(full, group=self.group)'''),
    ],
}
