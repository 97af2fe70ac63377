r"""ShardedOptimizer broadcasts the parameters from global rank 0 (src=0), not from the group's
rank 0: on the group {1, 3}, global rank 0 is not a member.

EXPECT: ShardedOptimizer_subgroups.*not part of group.*hint: rule 'Group'.*GLOBAL rank.*get_global_rank\(group, 0\)
CLASS: subgroup
WORLD_SIZES: 4
ONLY: ShardedOptimizer_subgroups
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "source": [
        (r'''    return dist.get_global_rank(group, 0) if group is not None else 0
''',
         r'''    return 0
'''),
    ],
}
