r"""data_parallel_pipeline also averages the loss over dp_group (student walk-through M53):
each last stage returns the whole batch's loss, not its replica's.

EXPECT: data_parallel_pipeline.*step0/loss .*averaging the replicas' losses over dp_group.*no all-reduce of the loss
CLASS: traffic
WORLD_SIZES: 2
ONLY: data_parallel_pipeline

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "data_parallel_pipeline": [
        (r'''            p.grad /= replicas
    return loss''',
         r'''            p.grad /= replicas
    if loss is not None:
        dist.all_reduce(loss, group=dp_group)
        loss = loss / replicas
    return loss'''),
    ],
}
