r"""gpipe never marks the received activation x_i.requires_grad_(): x_i.grad stays None and
the stage sends None back (student walk-through M24; this gpipe sends on every stage but the
first, where the reference skips a None). gloo either sends nothing or raises at the send:
both are reported with the cause.

EXPECT: gpipe.*rank 1(.s send at .* in gpipe sends 0 bytes \(None or an empty tensor\) to rank 0, whose irecv at .*hint: the send was given None| raised TypeError.*NoneType.*hint: a send was given None).*requires_grad_\(\)
CLASS: values
WORLD_SIZES: 2
ONLY: gpipe

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "gpipe": [
        (r'''        x.requires_grad_(not stage.is_first)
''',
         r''''''),
        (r'''        if dx is not None:
            _exchange(stage, send=[(dx, stage.prev)])''',
         r'''        if not stage.is_first:
            dist.send(dx, stage.prev, group=stage.group)'''),
    ],
}
