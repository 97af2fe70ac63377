r"""gpipe waits for the gradient from the previous stage instead of the next one.

EXPECT: gpipe.*deadlock.*rank 0 waits to receive from rank 1, but rank 1 never posted a send to rank 0
CLASS: deadlock off-by-one
WORLD_SIZES: 3
ONLY: gpipe

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "gpipe": [
        (r'''        if grad is not None:
            _exchange(stage, recv=[(grad, stage.next)])
''',
         r'''        if grad is not None:
            _exchange(stage, recv=[(grad, stage.prev if not stage.is_first else stage.next)])
'''),
    ],
}
