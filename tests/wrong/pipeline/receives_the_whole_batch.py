r"""gpipe allocates each receive buffer like the whole batch, not like one micro-batch (student
walk-through M41): gloo fills part of it, the loss then meets targets of another shape.

EXPECT: gpipe.*(sends 128 bytes to rank 1, whose recv at .* in gpipe receives into a buffer of 768 bytes.*hint: a receive must hold exactly what its send sends|raised RuntimeError: The size of tensor.*hint: shapes that do not match: what travels between stages is ONE micro-batch)
CLASS: values
WORLD_SIZES: 2
ONLY: gpipe

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "gpipe": [
        (r'''        x = _input(stage, xs, i)
        _exchange(stage, recv=[] if stage.is_first else [(x, stage.prev)])''',
         r'''        x = _input(stage, xs, i) if stage.is_first else torch.empty_like(inputs)
        if not stage.is_first:
            dist.recv(x, stage.prev, group=stage.group)'''),
    ],
}
