r"""DP x PP averages with E1's average_gradients on the stage, and runs GPipe instead of 1F1B.

A correct implementation: solutions/pipeline.py with this one difference.
"""

# The difference, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "data_parallel_pipeline": [
        (r'''    for p in stage.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=dp_group)
            p.grad /= replicas
''',
         r'''    data_parallel.average_gradients(stage, group=dp_group)
'''),
        (r'''    loss = one_f_one_b(stage, inputs.chunk''',
         r'''    loss = gpipe(stage, inputs.chunk'''),
    ],
}
# edits of module-level text, applied after EDITS:
REPLACE = [
    (r'''from torch import nn
''',
     r'''from torch import nn

from . import data_parallel
'''),
]
