"""Fresh column and row layers draw the whole serial-shaped weight (Megatron's "master weight"
init) and keep their slice: the same distribution as drawing the shard alone.
"""
REPLACE = [
    ("""        self.weight = _uniform((local, in_features), in_features, device, dtype)
        self.bias = _uniform((local,), in_features, device, dtype) if bias else None""",
     """        master = _uniform((out_features, in_features), in_features, device, dtype)
        mine = slice(self.tp_rank * local, (self.tp_rank + 1) * local)
        self.weight = nn.Parameter(master.detach()[mine].clone())
        del master
        self.bias = _uniform((local,), in_features, device, dtype) if bias else None"""),
    ("""        self.weight = _uniform((out_features, local), in_features, device, dtype)""",
     """        master = _uniform((out_features, in_features), in_features, device, dtype)
        mine = slice(self.tp_rank * local, (self.tp_rank + 1) * local)
        self.weight = nn.Parameter(master.detach()[:, mine].contiguous())
        del master"""),
]
