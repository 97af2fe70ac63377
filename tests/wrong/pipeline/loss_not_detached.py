r"""gpipe returns the sum of the micro-batches' losses still in the graph, not detached
(student walk-through M60): the right value, requires_grad True.

EXPECT: gpipe.*rank 1, M=6/returned loss is detached \(requires_grad False\) is False, expected True.*rule 'Results'
CLASS: values
WORLD_SIZES: 2
ONLY: gpipe

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "gpipe": [
        (r'''            loss = out.detach() if loss is None else loss + out.detach()''',
         r'''            loss = out if loss is None else loss + out'''),
    ],
}
