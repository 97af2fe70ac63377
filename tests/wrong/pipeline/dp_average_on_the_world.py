r"""DP x PP averages the gradients over every rank (the world), not over the stage's dp group.

EXPECT: rank 0, step0: all_reduce at pipeline.py:\d+ in data_parallel_pipeline ran on ranks \[0, 1, 2, 3\]; this call belongs to the group of ranks \[0, 2\].*rule 'Group'
CLASS: wrong-group values
RULE: Group
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
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
'''),
    ],
}
