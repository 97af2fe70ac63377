r"""parallelize_2d reuses E1's DataParallel to broadcast over dp_group, whose hooks stay registered: backward all-reduces every gradient, and sync_gradients again.

EXPECT: FAIL  \[E6\.3\] groups\.train_2d_bert .*backward: all_reduce at data_parallel\.py:\d+ in _on_grad ran on ranks \[0, 2\]; this call belongs to the group of ranks \[0, 1\].*hint: rule 'Communication' over a whole step.*data-parallel hook left registered
CLASS: traffic
WORLD_SIZES: 4
ONLY: train_2d_bert
RULE: Communication

A wrong implementation: solutions/groups.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/groups.py):
EDITS = {
    "parallelize_2d": [
        (r'''    src = dist.get_global_rank(groups.dp_group, 0)
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(t, src=src, group=groups.dp_group)
    return model
''',
         r'''    data_parallel.DataParallel(model, group=groups.dp_group)   # broadcasts from dp rank 0
    return model
'''),
    ],
}
