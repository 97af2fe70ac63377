r"""Backward keeps, as dk and dv, only its own queries' part of its own block's gradients: the
other ranks' queries' contributions never travel back to the block's owner.

EXPECT: ring_attention_backward.*backward/grad k .*EVERY rank's queries
CLASS: values forgotten-collective
WORLD_SIZES: 2
ONLY: ring_attention_backward
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "ring_attention_backward": [
        (r'''        if sending is not None:                                  # block s's accumulators, from r+1
            dk_s += sending[0].wait()
            dv_s += sending[1].wait()
        sending = (rotate_async(dk_s, "counterclockwise", group),
                   rotate_async(dv_s, "counterclockwise", group))
        if incoming is not None:
            k, v = incoming[0].wait(), incoming[1].wait()
    return dq, sending[0].wait(), sending[1].wait()              # home after N moves
''',
         r'''        if step == 0:                                            # our own block's gradients
            dk, dv = dk_s, dv_s
        if incoming is not None:
            k, v = incoming[0].wait(), incoming[1].wait()
    return dq, dk, dv
'''),
    ],
}
