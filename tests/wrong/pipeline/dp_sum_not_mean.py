r"""DP x PP all-reduces the replicas' gradients and never divides by D.

EXPECT: step0/grad 0.0.weight.*2 x the expected value \(the replicas' gradients summed, not averaged
CLASS: values
WORLD_SIZES: 2
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
            dist.all_reduce(p.grad, group=dp_group)
'''),
    ],
}
