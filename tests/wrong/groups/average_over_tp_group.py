r"""sync_gradients averages gradients over the TP group instead of the DP group.

Shards of different weights get averaged together, and the replicas never see each
other's batches.

WORLD_SIZES: 4
EXPECT: train_2d_bert.*sync: all_reduce at data_parallel\.py:\d+ in average_gradients, called from groups\.py:\d+ in sync_gradients ran on ranks \[0, 1\]; this call belongs to the group of ranks \[0, 2\].*hint: rule 'Group': sync_gradients averages every gradient over groups\.dp_group
CLASS: values
ONLY: train_2d_bert
RULE: Group
"""

# The bug, as edits of the reference solution (solutions/groups.py):
EDITS = {
    "sync_gradients": [
        (r'''    data_parallel.average_gradients(model, group=groups.dp_group)
''',
         r'''    data_parallel.average_gradients(model, group=groups.tp_group)
'''),
    ],
}
