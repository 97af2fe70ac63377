r"""sync_gradients averages only the tensor-parallel layers' parameters and forgets the replicated ones (LayerNorms, classifier head / LM decoder).

Replicated parameters are equal inside a TP group, but each DP replica saw another batch,
so they must be averaged over the DP group too.

WORLD_SIZES: 4
EXPECT: train_2d_bert.*sync/grad blocks\.0\.ln1\.weight.*hint:.*replicated LayerNorms
CLASS: forgotten-collective
ONLY: train_2d_bert
"""

# The bug, as edits of the reference solution (solutions/groups.py):
EDITS = {
    "sync_gradients": [
        (r'''    data_parallel.average_gradients(model, group=groups.dp_group)
''',
         r'''    tp_layers = (tensor_parallel.ColumnParallelLinear, tensor_parallel.RowParallelLinear,
                 tensor_parallel.ParallelEmbedding)
    for module in model.modules():
        if isinstance(module, tp_layers):   # replicated params are already equal
            for p in module.parameters():
                if p.grad is None:
                    continue
                dist.all_reduce(p.grad, group=groups.dp_group)
                p.grad /= groups.dp_size
'''),
    ],
}
