r"""RingAttention keeps what backward needs on its class instead of saving it on ctx: a second
call before one backward overwrites the first call's tensors, which its backward then reads.

EXPECT: attention_layer .*step1 backward/grad input.*never on the class or in a global
CLASS: per-call-state
WORLD_SIZES: 2
ONLY: attention_layer
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "RingAttention.forward": [
        (r'''        ctx.save_for_backward(q, k, v, out, lse)
        return out
''',
         r'''        RingAttention.saved = (q, k, v, out, lse)
        return out
'''),
    ],
    "RingAttention.backward": [
        (r'''        grads = ring_attention_backward(grad_out.contiguous(), *ctx.saved_tensors, ctx.causal,''',
         r'''        grads = ring_attention_backward(grad_out.contiguous(), *RingAttention.saved, ctx.causal,'''),
    ],
}
