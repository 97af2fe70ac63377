r"""ring_peers turns group ranks into global ranks by adding the group's first global rank:
right for a group of consecutive ranks only.

EXPECT: rotation\.ring_peers .*all but rank 1 (counter)?clockwise/\(destination, source\) as global ranks.*rule 'Group'.*ranks need not be consecutive
CLASS: subgroup non-consecutive
WORLD_SIZES: 3
ONLY: ring_peers subgroup
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "_global_rank": [
        (r'''def _global_rank(group, group_rank):
    return group_rank if group is None else dist.get_global_rank(group, group_rank)
''',
         r'''def _global_rank(group, group_rank):
    return group_rank if group is None else dist.get_global_rank(group, 0) + group_rank
'''),
    ],
}
