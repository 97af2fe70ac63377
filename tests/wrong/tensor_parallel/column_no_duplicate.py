r"""ColumnParallelLinear forgets duplicate(x): the input gradient is this rank's partial sum, never all-reduced.

Forward is right; backward gives each rank only its own shard's share of dL/dx
(the MLP's input gradient too), unless N == 1.

EXPECT: ColumnParallelLinear  .*backward/grad input.*hint:.*SUM over ranks.*comm\.duplicate
CLASS: forgotten-collective
WORLD_SIZES: 2
ONLY: ColumnParallelLinear
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ColumnParallelLinear.forward": [
        (r'''    def forward(self, x):
        x = comm.duplicate(x, self.group)
        y = F.linear(x, self.weight, self.bias)
''',
         r'''    def forward(self, x):
        y = F.linear(x, self.weight, self.bias)
'''),
    ],
}
