r"""Each micro-batch's loss is not scaled by 1/M: the gradients are M times serial's.

EXPECT: M=6/grad 0.0.weight.*6 x the expected value \(each micro-batch.s loss not scaled by 1/M\)
CLASS: values
RULE: Results
WORLD_SIZES: 2
ONLY: gpipe

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "_forward": [
        (r'''    return loss_fn(out, target) / m if stage.is_last else out
''',
         r'''    return loss_fn(out, target) if stage.is_last else out
'''),
    ],
}
