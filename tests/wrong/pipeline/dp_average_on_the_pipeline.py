r"""DP x PP averages the gradients over the pipeline's own group (stage.group) instead of dp_group.

EXPECT: all_reduce at pipeline.py:\d+ in data_parallel_pipeline ran on ranks \[0, 1\]; this call belongs to the group of ranks \[0, 2\]
CLASS: wrong-group values
WORLD_SIZES: 4
ONLY: data_parallel_pipeline

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "data_parallel_pipeline": [
        (r'''    for p in stage.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=dp_group)
            p.grad /= replicas
''',
         r'''    for p in stage.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=stage.group)
            p.grad /= replicas
'''),
    ],
}
