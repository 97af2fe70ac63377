r"""Forward keeps every received block on the autograd context, "for backward": a rank ends up
holding the whole sequence's keys and values until backward.

EXPECT: forward/received bytes still held after forward is \d+, expected at most 0.*rule 'Memory'
CLASS: memory
WORLD_SIZES: 2
ONLY: ring_attention_backward
RULE: Memory
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "ring_attention_forward": [
        (r'''def ring_attention_forward(q, k, v, causal=False, group=None):
''',
         r'''def ring_attention_forward(q, k, v, causal=False, group=None, keep=None):
'''),
        (r'''            k, v = incoming[0].wait(), incoming[1].wait()        # the block used is dropped
''',
         r'''            k, v = incoming[0].wait(), incoming[1].wait()        # the block used is dropped
            if keep is not None:
                keep[(s - 1) % world] = (k, v)
'''),
    ],
    "RingAttention.forward": [
        (r'''        out, lse = ring_attention_forward(q, k, v, causal, group)
        ctx.save_for_backward(q, k, v, out, lse)
''',
         r'''        ctx.blocks = {}                                          # for backward
        out, lse = ring_attention_forward(q, k, v, causal, group, ctx.blocks)
        ctx.save_for_backward(q, k, v, out, lse)
'''),
    ],
}
