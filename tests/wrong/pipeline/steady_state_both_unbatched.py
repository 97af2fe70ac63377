r"""one_f_one_b posts both steady-state pairs unbatched, each send before its receive (student
walk-through M31): neighbours block in sends to each other on NCCL.

EXPECT: one_f_one_b.*deadlock.*rank 0 and rank 1 are both blocked in a send to each other
CLASS: deadlock
WORLD_SIZES: 2
ONLY: one_f_one_b

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "one_f_one_b": [
        (r'''        _exchange(stage, send=[] if stage.is_last else [(out.detach(), stage.next)],
                  recv=[] if stage.is_last else [(grad, stage.next)])''',
         r'''        _exchange(stage, send=[] if stage.is_last else [(out.detach(), stage.next)])
        _exchange(stage, recv=[] if stage.is_last else [(grad, stage.next)])'''),
        (r'''            _exchange(stage, send=[] if dx is None else [(dx, stage.prev)],
                      recv=[] if stage.is_first else [(x, stage.prev)])''',
         r'''            _exchange(stage, send=[] if dx is None else [(dx, stage.prev)])
            _exchange(stage, recv=[] if stage.is_first else [(x, stage.prev)])'''),
    ],
}
