r"""sync_gradients all-reduces every parameter's .grad, frozen ones too: a parameter that does
not require grad has none (None), and the all-reduce refuses it.

EXPECT: train_2d_bert .*phase sync: rank \d raised TypeError.*hint: rule 'Frozen and unused'
CLASS: values frozen
RULE: Frozen and unused
WORLD_SIZES: 4
ONLY: train_2d_bert
"""

# The bug, as edits of the reference solution (solutions/groups.py):
EDITS = {
    "sync_gradients": [
        (r'''    data_parallel.average_gradients(model, group=groups.dp_group)
''',
         r'''    for p in model.parameters():
        dist.all_reduce(p.grad, group=groups.dp_group)
        p.grad /= groups.dp_size
'''),
    ],
}
