r"""one_f_one_b's cool-down runs its backwards but never sends x.grad back (student
walk-through M48): the previous stage waits for gradients that never come.

EXPECT: one_f_one_b.*deadlock.*rank 0 waits in phase 'M=6' to receive from rank 1, which (went on to phase|finished).*posted fewer sends to rank 0
CLASS: deadlock
WORLD_SIZES: 3
ONLY: one_f_one_b

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "one_f_one_b": [
        (r'''        _exchange(stage, recv=[(grad, stage.next)])
        dx = _backward(stage, old_x, old_out, grad)
        if dx is not None:
            _exchange(stage, send=[(dx, stage.prev)])''',
         r'''        _exchange(stage, recv=[(grad, stage.next)])
        _backward(stage, old_x, old_out, grad)'''),
    ],
}
