r"""1F1B's steady state posts the forward's send and the gradient's receive as two calls (send
first), the other pair batched (student walk-through M01): of each pair two neighbours post
toward each other, one side posts its receive with its send, which is all NCCL needs.

A correct implementation: solutions/pipeline.py with this one difference.
"""

# The difference, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "one_f_one_b": [
        (r'''        _exchange(stage, send=[] if stage.is_last else [(out.detach(), stage.next)],
                  recv=[] if stage.is_last else [(grad, stage.next)])
''',
         r'''        _exchange(stage, send=[] if stage.is_last else [(out.detach(), stage.next)])
        _exchange(stage, recv=[] if stage.is_last else [(grad, stage.next)])
'''),
    ],
}
