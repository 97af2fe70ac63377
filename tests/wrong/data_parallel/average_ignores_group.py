r"""average_gradients all-reduces over every rank and divides by the world's size, ignoring `group`.

EXPECT: average_gradients_subgroups.*all_reduce at data_parallel\.py:\d+ in average_gradients ran on ranks \[0, 1, 2, 3\]; this call belongs to the group of ranks \[0, 2\].*hint: rule 'Group'
CLASS: subgroup
WORLD_SIZES: 4
ONLY: average_gradients_subgroups
HIDDEN: no
RULE: Group
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "average_gradients": [
        (r'''    world = dist.get_world_size(group)
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)''',
         r'''    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)'''),
    ],
}
