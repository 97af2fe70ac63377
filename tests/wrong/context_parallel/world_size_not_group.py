r"""ring_attention_forward takes N from the world (dist.get_world_size()) instead of the group:
on a group of 2 ranks in a world of 3 it makes 3 steps and merges its own block twice.

EXPECT: subgroup.*rule 'Group'
CLASS: subgroup
WORLD_SIZES: 3
ONLY: subgroup
RULE: Group
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "ring_attention_forward": [
        (r'''    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if causal and q.shape[-2] % 2:
''',
         r'''    world, rank = dist.get_world_size(), dist.get_rank(group)
    if causal and q.shape[-2] % 2:
'''),
    ],
}
