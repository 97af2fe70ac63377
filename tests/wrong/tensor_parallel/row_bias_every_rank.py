"""RowParallelLinear adds its replicated bias on every rank BEFORE the all-reduce, so the output carries N * bias.

Right with one rank; from two ranks on the forward output (of the row layer, the MLP,
the attention) is off by (N-1) * bias and the bias gradient is still the full one.

EXPECT: RowParallelLinear  .*forward/output.*hint:.*bias ONCE, after the all-reduce
CLASS: bias-every-rank
WORLD_SIZES: 2
ONLY: RowParallelLinear
RULE: Replicated
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "RowParallelLinear.forward": [
        (r'''        y = comm.all_reduce(F.linear(x, self.weight), self.group)
        return y + self.bias if self.bias is not None else y
''',
         r'''        return comm.all_reduce(F.linear(x, self.weight, self.bias), self.group)
'''),
    ],
}
