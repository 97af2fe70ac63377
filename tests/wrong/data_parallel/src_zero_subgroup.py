r"""DataParallel broadcasts from global rank 0 even when `group` does not contain it.

EXPECT: DataParallel_subgroups .*hint: the broadcast source is group rank 0, whose GLOBAL rank is dist\.get_global_rank\(group, 0\)
CLASS: subgroup
WORLD_SIZES: 4
ONLY: average_gradients DataParallel_subgroups
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "DataParallel.__init__": [
        (r'''        src = dist.get_global_rank(group, 0) if group is not None else 0
''',
         r'''        src = 0
'''),
    ],
}
