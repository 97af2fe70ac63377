"""RowParallelLinear adds the bias before the all-reduce on rank 0 only: the forward is right, but the bias gets no gradient on the other ranks.

The replicated bias then differs between ranks after the first optimizer step
(rank 0 moved it, the others did not).

EXPECT: RowParallelLinear  .*rank 1, backward/grad bias is None.*hint:.*bias ONCE, after the all-reduce
CLASS: values
WORLD_SIZES: 2
ONLY: RowParallelLinear
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "RowParallelLinear.forward": [
        (r'''        y = comm.all_reduce(F.linear(x, self.weight), self.group)
        return y + self.bias if self.bias is not None else y
''',
         r'''        bias = self.bias if self.tp_rank == 0 else None   # count the bias once
        return comm.all_reduce(F.linear(x, self.weight, bias), self.group)
'''),
    ],
}
