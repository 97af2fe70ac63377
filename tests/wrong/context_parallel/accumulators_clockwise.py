r"""Backward rotates k and v counterclockwise but sends the gradient accumulators clockwise: the
same ring at two ranks, at three an accumulator reaches a rank holding another block.

EXPECT: ring_attention_backward.*world size 3.*backward/grad k .*it equals what k and v rotating in backward the opposite way to their gradient accumulators .*gives.*travel the SAME way
CLASS: direction 3-4-ranks
WORLD_SIZES: 2 3
ONLY: ring_attention_backward
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "ring_attention_backward": [
        (r'''        sending = (rotate_async(dk_s, "counterclockwise", group),
                   rotate_async(dv_s, "counterclockwise", group))
''',
         r'''        sending = (rotate_async(dk_s, "clockwise", group),
                   rotate_async(dv_s, "clockwise", group))
'''),
    ],
}
