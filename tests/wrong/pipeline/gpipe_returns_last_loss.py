r"""gpipe returns only the last micro-batch's scaled loss, not the sum of the M (student
walk-through M22); the gradients are right.

EXPECT: gpipe.*M=6/loss .*it equals what returning only the last micro-batch's loss .* gives.*the last stage returns the sum
CLASS: values
WORLD_SIZES: 2
ONLY: gpipe

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "gpipe": [
        (r'''            loss = out.detach() if loss is None else loss + out.detach()''',
         r'''            loss = out.detach()'''),
    ],
}
