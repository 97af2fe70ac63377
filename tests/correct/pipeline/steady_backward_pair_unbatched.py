r"""1F1B's steady state posts the backward's send and the next activation's receive as two
calls (send first), the other pair batched (student walk-through M02): one side of each pair
two neighbours post toward each other still posts its receive with its send.

A correct implementation: solutions/pipeline.py with this one difference.
"""

# The difference, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "one_f_one_b": [
        (r'''            _exchange(stage, send=[] if dx is None else [(dx, stage.prev)],
                      recv=[] if stage.is_first else [(x, stage.prev)])
''',
         r'''            _exchange(stage, send=[] if dx is None else [(dx, stage.prev)])
            _exchange(stage, recv=[] if stage.is_first else [(x, stage.prev)])
'''),
    ],
}
