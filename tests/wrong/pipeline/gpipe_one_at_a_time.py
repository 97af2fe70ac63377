r"""gpipe runs each micro-batch's backward right after its forward: no pipelining, a stage idle while the others work.

EXPECT: M=6/forwards and backwards, in order is 'FBFBFBFBFBFB', expected 'FFFFFFBBBBBB'.*rule 'Schedule'
CLASS: values
RULE: Schedule
WORLD_SIZES: 2
ONLY: gpipe

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "gpipe": [
        (r'''        kept.append((x, out))
    for x, out in kept:
''',
         r'''        kept = [(x, out)]
        for x, out in kept:
'''),
    ],
}
# edits of module-level text, applied after EDITS:
REPLACE = [
    (r'''        grad = None if stage.is_last else torch.empty_like(out)
        if grad is not None:
            _exchange(stage, recv=[(grad, stage.next)])
        dx = _backward(stage, x, out, grad)
        if dx is not None:
            _exchange(stage, send=[(dx, stage.prev)])
    return loss


def one_f_one_b''',
     r'''            grad = None if stage.is_last else torch.empty_like(out)
            if grad is not None:
                _exchange(stage, recv=[(grad, stage.next)])
            dx = _backward(stage, x, out, grad)
            if dx is not None:
                _exchange(stage, send=[(dx, stage.prev)])
    return loss


def one_f_one_b'''),
]
