r"""AllGather keeps its slice's place on the class (AllGather.dim, .size) instead of ctx: a
second call before the first call's backward overwrites it, and the first backward slices
with the second call's dim.

EXPECT: AllGather .*returned an invalid gradient
SAYS: exception.gradient-shape
CLASS: values per-call-state
WORLD_SIZES: 2
ONLY: AllGather
"""

# The bug, as edits of the reference solution (solutions/comm.py):
EDITS = {
    "AllGather.forward": [
        (r'''        ctx.dim, ctx.rank, ctx.size = dim, rank, x.shape[dim]
''',
         r'''        AllGather.dim, AllGather.rank, AllGather.size = dim, rank, x.shape[dim]
'''),
    ],
    "AllGather.backward": [
        (r'''        return grad.narrow(ctx.dim, ctx.rank * ctx.size, ctx.size).contiguous(), None, None
''',
         r'''        return (grad.narrow(AllGather.dim, AllGather.rank * AllGather.size, AllGather.size)
                .contiguous(), None, None)
'''),
    ],
}
