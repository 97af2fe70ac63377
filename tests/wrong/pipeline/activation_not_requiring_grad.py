r"""The received activation is not marked requires_grad: its gradient is never computed, nothing to send back.

EXPECT: gpipe.*deadlock.*rank 0 waits to receive from rank 1, but rank 1 never posted a send to rank 0.*it posted no send at all
CLASS: values
WORLD_SIZES: 2
ONLY: gpipe

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "gpipe": [
        (r'''        x.requires_grad_(not stage.is_first)
        out = _forward(stage, x, ys[i], loss_fn, num_microbatches)
''',
         r'''        out = _forward(stage, x, ys[i], loss_fn, num_microbatches)
'''),
    ],
}
