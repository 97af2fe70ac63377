"""average_gradients: rank 0 skips the all-reduce of biases: its next all-reduce meets the others' bias all-reduce.

EXPECT: average_gradients.*(deadlock|left waiting|crashed.*did not match|calls do not match.*hint:.*same collective calls, in the same order)
CLASS: deadlock
WORLD_SIZES: 2
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
REPLACE = [
    (r'''        if p.grad is not None:
''',
     r'''        if p.grad is not None and not (dist.get_rank(group) == 0 and p.dim() == 1):
'''),
]
