r"""1F1B's steady state posts each send and the receive that goes with it as two calls: neighbours both send first, a hang on NCCL.

EXPECT: one_f_one_b.*deadlock: no rank moved.*rank 0 waited in wait\(\) on batch_isend_irecv.*rank 1 waited in wait\(\) on batch_isend_irecv
SAYS: hang.both-send-first
CLASS: deadlock
WORLD_SIZES: 2
ONLY: one_f_one_b

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "one_f_one_b": [
        (r'''        _exchange(stage, send=[] if stage.is_last else [(out.detach(), stage.next)],
                  recv=[] if stage.is_last else [(grad, stage.next)])
''',
         r'''        _exchange(stage, send=[] if stage.is_last else [(out.detach(), stage.next)])
        _exchange(stage, recv=[] if stage.is_last else [(grad, stage.next)])
'''),
        (r'''            _exchange(stage, send=[] if dx is None else [(dx, stage.prev)],
                      recv=[] if stage.is_first else [(x, stage.prev)])
''',
         r'''            _exchange(stage, send=[] if dx is None else [(dx, stage.prev)])
            _exchange(stage, recv=[] if stage.is_first else [(x, stage.prev)])
'''),
    ],
}
