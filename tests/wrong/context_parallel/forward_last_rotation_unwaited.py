r"""ring_attention_forward starts a rotation of k and v at every step, the last one too, and never waits the last one's handles: the blocks travel one step too many, and the handles are let go unwaited.

EXPECT: FAIL +\[E8\.2\] context_parallel\.ring_attention .*rank \d let go of a work it never waited \((isend|irecv) at rotation\.py:\d+ in rotate_async, called from context_parallel\.py:\d+ in ring_attention_forward
SAYS: comm.dropped
CLASS: unwaited traffic
WORLD_SIZES: 2
ONLY: ring_attention

A wrong implementation: solutions/context_parallel.py with this one bug (seen in a new student's
E8: before, gloo spun on the dropped pair until the check's CPU budget ran out, "too slow").
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "ring_attention_forward": [
        (r'''        incoming = None
        if i < world - 1:                                        # start moving it on, THEN compute
            incoming = (rotate_async(k, "clockwise", group), rotate_async(v, "clockwise", group))
''',
         r'''        incoming = (rotate_async(k, "clockwise", group), rotate_async(v, "clockwise", group))
'''),
        (r'''        if incoming is not None:
            k, v = incoming[0].wait(), incoming[1].wait()        # the block used is dropped
    return out, lse''',
         r'''        if i < world - 1:
            k, v = incoming[0].wait(), incoming[1].wait()        # the block used is dropped
    return out, lse'''),
    ],
}
