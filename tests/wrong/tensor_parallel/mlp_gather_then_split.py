r"""ParallelMLP gathers fc1's output and lets fc2 split it again (gather_output=True, input_is_parallel=False).

The values are right, but the hidden activation [..., hidden] travels: forward does an
all-gather and an all-reduce, backward an all-reduce and an all-gather, instead of one
all-reduce each way. Only the communication count shows it.

EXPECT: ParallelMLP  .*forward: \d all_gather\|all_gather_into_tensor call\(s\), expected exactly 0; seen: all_gather at comm\.py:\d+ in forward, called from tensor_parallel\.py:\d+ in forward.*hint:.*fc1 WITHOUT gather_output
CLASS: traffic
WORLD_SIZES: 2
ONLY: ParallelMLP
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ParallelMLP.from_linears": [
        (r'''        mlp.fc1 = ColumnParallelLinear.from_serial(fc1, gather_output=False, group=group)
''',
         r'''        mlp.fc1 = ColumnParallelLinear.from_serial(fc1, gather_output=True, group=group)
'''),
        (r'''        mlp.fc2 = RowParallelLinear.from_serial(fc2, input_is_parallel=True, group=group)
''',
         r'''        mlp.fc2 = RowParallelLinear.from_serial(fc2, input_is_parallel=False, group=group)
'''),
    ],
}
