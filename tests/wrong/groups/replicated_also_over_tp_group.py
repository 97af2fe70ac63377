r"""sync_gradients also averages the replicated parameters (LayerNorms, head) over the TP group, "to keep them in sync".

They are equal inside a TP group already, so the numbers do not change: only the
communication rule sees the extra all-reduce per replicated parameter.

WORLD_SIZES: 4
EXPECT: train_2d_bert.*phase sync.*all_reduce at groups\.py:\d+ in sync_gradients ran on ranks \[0, 1\]; this call belongs to the group of ranks \[0, 2\].*hint: rule 'Group'.*never tp_group
CLASS: traffic wrong-group
ONLY: train_2d_bert
"""

# The bug, as edits of the reference solution (solutions/groups.py):
EDITS = {
    "sync_gradients": [
        (r'''    data_parallel.average_gradients(model, group=groups.dp_group)
''',
         r'''    data_parallel.average_gradients(model, group=groups.dp_group)
    tp_layers = (tensor_parallel.ColumnParallelLinear, tensor_parallel.RowParallelLinear,
                 tensor_parallel.ParallelEmbedding)
    sharded = {id(p) for m in model.modules() if isinstance(m, tp_layers) for p in m.parameters()}
    for p in model.parameters():
        if id(p) not in sharded:
            dist.all_reduce(p.grad, group=groups.tp_group)
            p.grad /= groups.tp_size
'''),
    ],
}
