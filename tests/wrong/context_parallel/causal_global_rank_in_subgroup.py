r"""ring_attention_forward takes r from dist.get_rank() without the group (the global rank) while
its rotations and N are the group's: right where group ranks are global ones, a wrong causal
case on group {0, 2} at three ranks (rank 2 takes itself for group rank 2 of 2).

EXPECT: subgroup_causal.*subgroup causal forward/output .*it equals what r = the global rank \(dist.get_rank\(\) without the group\) gives.*rule 'Group'
CLASS: subgroup non-consecutive
WORLD_SIZES: 3
ONLY: subgroup_causal
RULE: Group
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "ring_attention_forward": [
        (r'''    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if causal and q.shape[-2] % 2:
''',
         r'''    world, rank = dist.get_world_size(group), dist.get_rank()
    if causal and q.shape[-2] % 2:
'''),
    ],
}
