r"""Backward rotates k and v CLOCKWISE, as forward does, but the gradient accumulators still go
counterclockwise (and step k still takes its block for rank (r + k) % N's): the same ring at
two ranks, at three an accumulator meets ranks that hold other blocks.

EXPECT: ring_attention_backward.*world size 3.*backward/grad k .*it equals what k and v rotating in backward the opposite way to their gradient accumulators .*gives.*travel the SAME way: k, v and the accumulators all COUNTERCLOCKWISE
CLASS: direction 3-4-ranks
WORLD_SIZES: 2 3
ONLY: ring_attention_backward
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "ring_attention_backward": [
        (r'''            incoming = (rotate_async(k, "counterclockwise", group),
                        rotate_async(v, "counterclockwise", group))
''',
         r'''            incoming = (rotate_async(k, "clockwise", group),
                        rotate_async(v, "clockwise", group))
'''),
    ],
}
