r"""gpipe averages the M losses it already scaled by 1/M: the returned loss is 1/M of the batch's.

EXPECT: rank 1, M=6/loss.*0.1667 x the expected value \(the loss scaled by 1/M twice
CLASS: values
WORLD_SIZES: 2
ONLY: gpipe

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
REPLACE = [
    (r'''            _exchange(stage, send=[(dx, stage.prev)])
    return loss


def one_f_one_b''',
     r'''            _exchange(stage, send=[(dx, stage.prev)])
    return None if loss is None else loss / num_microbatches


def one_f_one_b'''),
]
