r"""Every DP x PP replica trains on the whole batch instead of its own shard of it.

EXPECT: step0/loss.*it equals what training every replica on the whole batch.*each replica trains on its own shard
CLASS: values
WORLD_SIZES: 2
ONLY: data_parallel_pipeline

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "data_parallel_pipeline": [
        (r'''    loss = one_f_one_b(stage, inputs.chunk(replicas)[replica], targets.chunk(replicas)[replica],
                       loss_fn, num_microbatches, stage.group)
''',
         r'''    loss = one_f_one_b(stage, inputs, targets, loss_fn, num_microbatches, stage.group)
'''),
    ],
}
