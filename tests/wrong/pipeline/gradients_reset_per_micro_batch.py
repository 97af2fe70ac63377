r"""Each micro-batch's backward starts from zeroed gradients: only the last micro-batch's are left.

EXPECT: M=6/grad 0.0.weight.*it equals what only the last micro-batch's gradient \(.grad reset before each backward\) gives
CLASS: accumulation values
WORLD_SIZES: 2
ONLY: gpipe

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "_backward": [
        (r'''    if stage.is_last:
        out.backward()
''',
         r'''    stage.zero_grad()
    if stage.is_last:
        out.backward()
'''),
    ],
}
