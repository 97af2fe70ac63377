r"""Forward computes a token op (k.new_zeros(1).add_(1)) while the next block is in flight, then
waits for it before the attention with the block in hand: no transfer is hidden.

EXPECT: forward/compute while the next block is in flight is False, expected True.*rule 'Overlap'
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
            k.new_zeros(1).add_(1)                  # "compute" while the next block travels
            arrived = incoming[0].wait(), incoming[1].wait()
        if not causal:
'''),
        (r'''            k, v = incoming[0].wait(), incoming[1].wait()        # the block used is dropped
''',
         r'''            k, v = arrived                                       # the block used is dropped
'''),
    ],
}
