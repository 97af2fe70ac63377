r"""ColumnParallelLinear ignores gather_output=True and returns the local shard [..., out/N].

Right with one rank; from two on the output has the wrong shape.

EXPECT: gather_output.*forward/output has shape \(2, 4, 48\), expected \(2, 4, 96\).*hint:.*all-gather
CLASS: values
WORLD_SIZES: 2
ONLY: ColumnParallelLinear_gather_output
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ColumnParallelLinear.forward": [
        (r'''        return comm.all_gather(y, dim=-1, group=self.group) if self.gather_output else y
''',
         r'''        return y   # each rank keeps its slice
'''),
    ],
}
