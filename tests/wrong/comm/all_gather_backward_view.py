r"""AllGather.backward returns the narrowed view of the gradient, not a contiguous slice.

EXPECT: FAIL  \[E2\.2\] comm\.AllGather .*the gradient backward returned is contiguous.*hint: AllGather\.backward must return a contiguous gradient
CLASS: device
WORLD_SIZES: 2
ONLY: AllGather

A wrong implementation: solutions/comm.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/comm.py):
EDITS = {
    "AllGather.backward": [
        (r'''        return grad.narrow(ctx.dim, ctx.rank * ctx.size, ctx.size).contiguous(), None, None
''',
         r'''        return grad.narrow(ctx.dim, ctx.rank * ctx.size, ctx.size), None, None
'''),
    ],
}
