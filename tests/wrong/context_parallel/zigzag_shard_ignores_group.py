r"""zigzag_shard takes r and N from the world (dist.get_rank(), dist.get_world_size()) and
ignores its group: on group {0, 2} of three ranks it cuts 2 x 3 chunks, not 2 x 2.

EXPECT: subgroup_causal.*subgroup zigzag_shard/shard along dim 1 has shape .*rule 'Group'
CLASS: subgroup non-consecutive
WORLD_SIZES: 3
ONLY: subgroup_causal
RULE: Group
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "zigzag_shard": [
        (r'''    world, rank = dist.get_world_size(group), dist.get_rank(group)
    _check_divisible(x.shape[dim], world)
''',
         r'''    world, rank = dist.get_world_size(), dist.get_rank()
    _check_divisible(x.shape[dim], world)
'''),
    ],
}
