r"""DataParallel takes the broadcast's source as its global rank minus its group rank, which is
group rank 0's global rank only when the group's ranks are consecutive.

EXPECT: DataParallel_subgroups .*phase init: rank \d raised ValueError: Global rank \d is not part of group.*hint: the broadcast source is group rank 0, whose GLOBAL rank is dist\.get_global_rank\(group, 0\)
CLASS: subgroup non-consecutive
WORLD_SIZES: 4
ONLY: DataParallel_subgroups
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "DataParallel.__init__": [
        (r'''        src = dist.get_global_rank(group, 0) if group is not None else 0
''',
         r'''        src = dist.get_rank() - dist.get_rank(group)   # the group's first rank
'''),
    ],
}
