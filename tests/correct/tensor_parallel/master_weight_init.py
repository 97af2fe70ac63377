"""Fresh column and row layers draw the whole serial-shaped weight (Megatron's "master weight"
init) and keep their slice: the same distribution as drawing the shard alone.
"""
EDITS = {
    "ColumnParallelLinear.__init__": [
        (r'''        self.weight = _uniform((local, in_features), in_features, device, dtype)
        self.bias = _uniform((local,), in_features, device, dtype) if bias else None''',
         r'''        master = _uniform((out_features, in_features), in_features, device, dtype)
        mine = slice(self.tp_rank * local, (self.tp_rank + 1) * local)
        self.weight = nn.Parameter(master.detach()[mine].clone())
        del master
        self.bias = _uniform((local,), in_features, device, dtype) if bias else None'''),
    ],
    "RowParallelLinear.__init__": [
        (r'''        self.weight = _uniform((out_features, local), in_features, device, dtype)''',
         r'''        master = _uniform((out_features, in_features), in_features, device, dtype)
        mine = slice(self.tp_rank * local, (self.tp_rank + 1) * local)
        self.weight = nn.Parameter(master.detach()[:, mine].contiguous())
        del master'''),
    ],
}
