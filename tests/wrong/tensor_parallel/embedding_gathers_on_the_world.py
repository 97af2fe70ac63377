r"""ParallelEmbedding all-gathers its columns over the whole world, not `group`: right until the layer lives on a subgroup.

EXPECT: HANG  \[E3\.4\] tensor_parallel\.ParallelEmbedding_subgroup .*rank 0 waited in all_gather.*rank 1 finished the check.*hint: rank\(s\) 1 finished this check while the others wait in all_gather.*pass `group` to every collective
CLASS: subgroup
WORLD_SIZES: 3
ONLY: ParallelEmbedding ParallelEmbedding_subgroup

A wrong implementation: solutions/tensor_parallel.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ParallelEmbedding.forward": [
        (r'''        return comm.all_gather(local, dim=-1, group=self.group)
''',
         r'''        return comm.all_gather(local, dim=-1)
'''),
    ],
}
