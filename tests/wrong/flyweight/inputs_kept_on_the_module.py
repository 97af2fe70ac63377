r"""The autograd Function keeps the layer's inputs on the wrapper for backward instead of
saving them on ctx: a second call before backward overwrites them, and the first call's
backward uses the second call's input.

EXPECT: flyweight\.FlyweightWrapper .*(backward/grad input 0 (max abs error|has shape).*two calls before one backward|Mismatch in shape.*another call's input)
SAYS: exception.recomputed-shape
CLASS: values per-call-state
WORLD_SIZES: 2
ONLY: FlyweightWrapper
"""
BASE = "simple"

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
EDITS = {
    "_RotatedShards.forward": [
        (r'''        ctx.wrapper, ctx.extra, ctx.n_inputs = wrapper, extra, n_inputs
        ctx.save_for_backward(*tensors)
        return wrapper._rotating_forward(tensors[:n_inputs], extra)
''',
         r'''        ctx.wrapper, ctx.extra, ctx.n_inputs = wrapper, extra, n_inputs
        wrapper.saved = tensors                  # what backward needs, on the layer
        return wrapper._rotating_forward(tensors[:n_inputs], extra)
'''),
    ],
    "_RotatedShards.backward": [
        (r'''        saved, n = ctx.saved_tensors, ctx.n_inputs
        needs = ctx.needs_input_grad[3:3 + n]
        grad_inputs, grad_shard''',
         r'''        saved, n = ctx.wrapper.saved, ctx.n_inputs
        needs = ctx.needs_input_grad[3:3 + n]
        grad_inputs, grad_shard'''),
    ],
}
