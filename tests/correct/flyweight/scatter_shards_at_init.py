"""FlyweightWrapper's construction scatters rank 0's shards (one dist.scatter of flat,
zero-padded shards) instead of broadcasting the full weights: each rank receives only its own.
"""
REPLACE = [
    ("""        src = _rank0(group)
        with torch.no_grad():
            pieces, trainable = [], {}
            for key in self.keys:
                full = module.get_parameter(key)
                dist.broadcast(full, src=src, group=group)   # everyone starts from rank 0
                pieces.append(self._take(full, *self.shard_ranges(self.rank)[key]).reshape(-1))
                trainable[key] = full.requires_grad
            # The shard's parameters are views of ONE flat tensor: it is sent as it is.
            self._flat = torch.cat(pieces)
""",
     """        src = _rank0(group)
        with torch.no_grad():
            trainable = {key: module.get_parameter(key).requires_grad for key in self.keys}
            first = module.get_parameter(self.keys[0])
            biggest = max(self.numels)
            mine = torch.empty(biggest, dtype=first.dtype, device=first.device)
            flats = None
            if self.rank == 0:
                flats = []
                for s in range(self.world):
                    flat = torch.cat([self._take(module.get_parameter(k).detach(),
                                                 *self.shard_ranges(s)[k]).reshape(-1)
                                      for k in self.keys])
                    flats.append(torch.cat([flat, flat.new_zeros(biggest - flat.numel())]))
            dist.scatter(mine, flats, src=src, group=group)
            # The shard's parameters are views of ONE flat tensor: it is sent as it is.
            self._flat = mine[: self.numels[self.rank]].clone()
"""),
]
