"""sync_gradients sums the gradients over the DP group without dividing by its size.

Gradients are D times too large (SGD steps D times too far; Adam hides part of it).

WORLD_SIZES: 4
EXPECT: train_2d_bert.*sync/grad.*divide by dp_size
SAYS: value.scaled
CLASS: values
ONLY: train_2d_bert
RULE: Results
"""

# The bug, as edits of the reference solution (solutions/groups.py):
EDITS = {
    "sync_gradients": [
        (r'''    data_parallel.average_gradients(model, group=groups.dp_group)
''',
         r'''    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=groups.dp_group)
'''),
    ],
}
