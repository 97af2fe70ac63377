"""FlyweightWrapper's construction scatters rank 0's shards (one dist.scatter of flat,
zero-padded shards) instead of broadcasting the full weights: each rank receives only its own.
"""
BASE = "simple"

EDITS = {
    "FlyweightWrapper.__init__": [
        (r'''        src = _rank0(group)
        with torch.no_grad():
            for key in self.keys:
                full = module.get_parameter(key)
                dist.broadcast(full, src=src, group=group)   # everyone starts from rank 0
                shard = self._take(full, *self.shard_ranges(self.rank)[key]).clone()
                *path, leaf = key.split(".")
                setattr(module.get_submodule(".".join(path)), leaf,
                        nn.Parameter(shard, requires_grad=full.requires_grad))
''',
         r'''        src = _rank0(group)
        with torch.no_grad():
            numels = [self._numel(s) for s in range(self.world)]
            first = module.get_parameter(self.keys[0])
            mine = torch.empty(max(numels), dtype=first.dtype, device=first.device)
            flats = None
            if self.rank == 0:   # group rank 0 cuts every shard, padded to the largest
                flats = []
                for s in range(self.world):
                    flat = torch.cat([self._take(module.get_parameter(k).detach(),
                                                 *self.shard_ranges(s)[k]).reshape(-1)
                                      for k in self.keys])
                    flats.append(torch.cat([flat, flat.new_zeros(max(numels) - flat.numel())]))
            dist.scatter(mine, flats, src=src, group=group)
            own = self._unpack(mine[:numels[self.rank]], self.rank)
            for key in self.keys:
                full = module.get_parameter(key)
                *path, leaf = key.split(".")
                setattr(module.get_submodule(".".join(path)), leaf,
                        nn.Parameter(own[key].clone(), requires_grad=full.requires_grad))
'''),
    ],
}
