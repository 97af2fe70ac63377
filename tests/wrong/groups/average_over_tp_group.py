r"""sync_gradients averages gradients over the TP group instead of the DP group.

Shards of different weights get averaged together, and the replicas never see each
other's batches.

WORLD_SIZES: 4
EXPECT: train_2d_bert.*sync/grad.*hint:.*MEAN over groups\.dp_group.*never on tp_group
CLASS: values
ONLY: train_2d_bert
"""

# The bug, as edits of the reference solution (solutions/groups.py):
REPLACE = [
    (r'''    data_parallel.average_gradients(model, group=groups.dp_group)
''',
     r'''    data_parallel.average_gradients(model, group=groups.tp_group)
'''),
]
