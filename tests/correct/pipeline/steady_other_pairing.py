r"""1F1B's steady state pairs differently (student walk-through M23): the forward's send is
batched with the NEXT activation's receive, the gradient's receive and x.grad's send are
posted alone. Every pair two neighbours post toward each other still has one side whose
receive is posted with or before its send, so NCCL completes it.

A correct implementation: solutions/pipeline.py with this one difference.
"""

# The difference, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "one_f_one_b": [
        (r'''        # this forward's send and the oldest micro-batch's gradient progress together
        _exchange(stage, send=[] if stage.is_last else [(out.detach(), stage.next)],
                  recv=[] if stage.is_last else [(grad, stage.next)])
        old_x, old_out = kept.pop(0)
        dx = _backward(stage, old_x, old_out, grad)
        if i == m - 1:
            if dx is not None:
                _exchange(stage, send=[(dx, stage.prev)])
        else:
            x = _input(stage, xs, i + 1)
            _exchange(stage, send=[] if dx is None else [(dx, stage.prev)],
                      recv=[] if stage.is_first else [(x, stage.prev)])
''',
         r'''        nxt = _input(stage, xs, i + 1) if i < m - 1 else None
        _exchange(stage, send=[] if stage.is_last else [(out.detach(), stage.next)],
                  recv=[] if stage.is_first or nxt is None else [(nxt, stage.prev)])
        _exchange(stage, recv=[] if stage.is_last else [(grad, stage.next)])
        old_x, old_out = kept.pop(0)
        dx = _backward(stage, old_x, old_out, grad)
        if dx is not None:
            _exchange(stage, send=[(dx, stage.prev)])
        x = nxt
'''),
    ],
}
