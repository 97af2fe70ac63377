r"""The layers use the global rank dist.get_rank() instead of the rank in `group`: right on the world group, wrong on a subgroup.

On the group of ranks 1..N-1, global rank 1 takes group rank 1's slice, and the last
rank's slice runs past the end.

EXPECT: ParallelMLP_subgroup.*rank 2 raised.*hint: rule 'Group': on a subgroup.*dist\.get_rank\(group\)
CLASS: subgroup 3-4-ranks
WORLD_SIZES: 3
ONLY: ParallelMLP_subgroup
RULE: Group
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "_tp": [
        (r'''    return dist.get_world_size(group), dist.get_rank(group)
''',
         r'''    return dist.get_world_size(group), dist.get_rank()
'''),
    ],
}
