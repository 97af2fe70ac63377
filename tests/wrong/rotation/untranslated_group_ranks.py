r"""Uses group ranks as global ranks for the peers (wrong in a subgroup).

EXPECT: rotation\.subgroup .*dist\.get_global_rank\(group, peer\)
CLASS: subgroup
WORLD_SIZES: 3
ONLY: subgroup
RULE: Group

A wrong implementation: solutions/rotation.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "_global_rank": [
        (r'''    return group_rank if group is None else dist.get_global_rank(group, group_rank)
''',
         r'''    return group_rank
'''),
    ],
}
