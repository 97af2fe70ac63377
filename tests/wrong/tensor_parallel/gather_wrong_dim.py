r"""ColumnParallelLinear with gather_output=True all-gathers along dim 0 (the batch) instead of the last (feature) dim.

The output has shape [N*B, ..., out/N] instead of [B, ..., out]; right only with one rank.

EXPECT: gather_output.*forward/output has shape \(4, 4, 48\), expected \(2, 4, 96\).*hint:.*LAST dim
CLASS: values
WORLD_SIZES: 2
ONLY: ColumnParallelLinear_gather_output
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ColumnParallelLinear.forward": [
        (r'''        return comm.all_gather(y, dim=-1, group=self.group) if self.gather_output else y
''',
         r'''        return comm.all_gather(y, dim=0, group=self.group) if self.gather_output else y
'''),
    ],
}
