r"""sync_gradients divides by dist.get_world_size(), the job's size, not the layer's ranks.

EXPECT: sync_gradients_subgroups.*rule 'Group'
CLASS: subgroup 3-4-ranks values
WORLD_SIZES: 4
ONLY: sync_gradients_subgroups
"""

EDITS = {
    "sync_gradients": [
        (r'''    world, _ = _world(model.group)
    replicas = 1 if dp_group is None else dist.get_world_size(dp_group)
''',
         r'''    world, _ = _world(None)
    world //= 1 if dp_group is None else dist.get_world_size(dp_group)
    replicas = 1 if dp_group is None else dist.get_world_size(dp_group)
'''),
    ],
}
