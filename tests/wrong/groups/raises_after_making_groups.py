r"""build_groups checks tp_size only after creating the groups: it raises ValueError all the
same, but the groups it made first leave the job's next dist.new_group calls mismatched.

EXPECT: groups\.build_groups .*structure/build_groups\(3\) creates no group before raising is False, expected True.*hint: rule 'Raises'
CLASS: values
RULE: Raises
WORLD_SIZES: 4
ONLY: build_groups
"""

# The bug, as edits of the reference solution (solutions/groups.py):
EDITS = {
    "build_groups": [
        (r'''    if tp_size < 1 or world % tp_size:
        raise ValueError(f"build_groups: the world size {world} is not divisible by "
                         f"tp_size={tp_size}; pick a tp_size that divides {world}")
    dp_size = world // tp_size
''',
         r'''    dp_size = max(world // tp_size, 1)
'''),
        (r'''    return ParallelGroups(tp_group, dp_group, tp_size, dp_size, tp_rank, dp_rank)
''',
         r'''    if tp_size < 1 or world % tp_size:
        raise ValueError(f"build_groups: the world size {world} is not divisible by "
                         f"tp_size={tp_size}; pick a tp_size that divides {world}")
    return ParallelGroups(tp_group, dp_group, tp_size, dp_size, tp_rank, dp_rank)
'''),
    ],
}
