r"""The last stage pairs micro-batch i's output with the targets of micro-batch M-1-i.

EXPECT: M=6/grad 0.0.weight.*it equals what micro-batch i's output paired with the targets of micro-batch M-1-i gives
CLASS: values
WORLD_SIZES: 2
ONLY: gpipe

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "gpipe": [
        (r'''        out = _forward(stage, x, ys[i], loss_fn, num_microbatches)
''',
         r'''        out = _forward(stage, x, ys[num_microbatches - 1 - i], loss_fn, num_microbatches)
'''),
    ],
}
