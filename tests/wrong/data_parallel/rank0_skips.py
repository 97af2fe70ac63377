r"""average_gradients: rank 0 skips the all-reduce of biases: its next all-reduce meets the others' bias all-reduce.

EXPECT: average_gradients.*the ranks' collective calls do not match: rank 0's 2nd collective on the group is all_reduce at data_parallel\.py:\d+ in average_gradients, given \[6, 12\] float64; rank 1's 2nd is all_reduce at data_parallel\.py:\d+ in average_gradients, given \[12\] float64.*hint: every rank makes the same collective calls, in the same order
CLASS: deadlock
WORLD_SIZES: 2
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "average_gradients": [
        (r'''        if p.grad is not None:
''',
         r'''        if p.grad is not None and not (dist.get_rank(group) == 0 and p.dim() == 1):
'''),
    ],
}
