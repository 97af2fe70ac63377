r"""RowParallelLinear with the full input slices it by hand (narrow) instead of comm.split:
the values are right, but backward never all-gathers dx, so the input gradient is only this
rank's slice.

EXPECT: RowParallelLinear_full_input.*backward/grad input max abs error.*got 0
SAYS: tensor_parallel.RowParallelLinear_full_input:backward/grad input
CLASS: forgotten-collective
WORLD_SIZES: 2
ONLY: RowParallelLinear_full_input
"""
EDITS = {
    "RowParallelLinear.forward": [
        (r'''        if not self.input_is_parallel:
            x = comm.split(x, dim=-1, group=self.group)''',
         r'''        if not self.input_is_parallel:
            size = x.shape[-1] // self.tp_size
            x = x.narrow(-1, self.tp_rank * size, size)'''),
    ],
}
