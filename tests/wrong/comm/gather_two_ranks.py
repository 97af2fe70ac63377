"""AllGather's backward slices as if there were 2 ranks (right for 2, wrong for 3 and 4).

EXPECT: AllGather.*world size 3
CLASS: 3-4-ranks
WORLD_SIZES: 2 3
"""

# The bug, as edits of the reference solution (solutions/comm.py):
EDITS = {
    "AllGather.backward": [
        (r'''        return grad.narrow(ctx.dim, ctx.rank * ctx.size, ctx.size).contiguous(), None, None
''',
         r'''        return grad.chunk(2, dim=ctx.dim)[min(ctx.rank, 1)].narrow(ctx.dim, 0, ctx.size).contiguous(), None, None
'''),
    ],
}
