r"""Backward waits for each k/v block right after posting its rotation, before computing with
the block in hand (the forward overlaps; the accumulators' rotations, posted after the compute
and waited a step later, still overlap: only the blocks' waits are early).

EXPECT: backward/compute while each k/v block is in flight is False, expected True.*rule 'Overlap'.*in backward, the blocks' rotations overlap the same way
CLASS: overlap
WORLD_SIZES: 2 3
ONLY: ring_attention_backward attention_layer
RULE: Overlap
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "ring_attention_backward": [
        (r'''            incoming = (rotate_async(k, "counterclockwise", group),
                        rotate_async(v, "counterclockwise", group))
''',
         r'''            incoming = (rotate_async(k, "counterclockwise", group),
                        rotate_async(v, "counterclockwise", group))
            arrived = incoming[0].wait(), incoming[1].wait()
'''),
        (r'''        if incoming is not None:
            k, v = incoming[0].wait(), incoming[1].wait()
    return dq, sending[0].wait(), sending[1].wait()              # home after N moves
''',
         r'''        if incoming is not None:
            k, v = arrived
    return dq, sending[0].wait(), sending[1].wait()              # home after N moves
'''),
    ],
}
