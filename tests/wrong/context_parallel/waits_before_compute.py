r"""Forward waits for the next block to arrive before computing with the one in hand (no
overlap: compute and transfer add up).

EXPECT: forward/compute while the next block is in flight is False, expected True.*no overlap
CLASS: overlap
WORLD_SIZES: 2
ONLY: ring_attention
RULE: Overlap
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "ring_attention_forward": [
        (r'''            incoming = (rotate_async(k, "clockwise", group), rotate_async(v, "clockwise", group))
        if not causal:
''',
         r'''            incoming = (rotate_async(k, "clockwise", group), rotate_async(v, "clockwise", group))
            arrived = incoming[0].wait(), incoming[1].wait()
        if not causal:
'''),
        (r'''            k, v = incoming[0].wait(), incoming[1].wait()        # the block used is dropped
''',
         r'''            k, v = arrived                                       # the block used is dropped
'''),
    ],
}
