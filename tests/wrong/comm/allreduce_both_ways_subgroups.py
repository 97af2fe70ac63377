r"""AllReduce's backward all-reduces too (g treated like f): the subgroup check fails as well, and says the cause is AllReduce's own failure, not the group argument.

EXPECT: FAIL  \[E2\.1\] comm\.AllReduce .*FAIL  \[E2\.1\] comm\.subgroups .*hint: this may follow from \[E2\.1\] comm\.AllReduce, which fails its own check
CLASS: values subgroup
WORLD_SIZES: 4
ONLY: AllReduce subgroups

A wrong implementation: solutions/comm.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/comm.py):
EDITS = {
    "AllReduce.backward": [
        (r'''    @staticmethod
    def backward(ctx, grad):
        return grad, None
''',
         r'''    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None
'''),
    ],
    "AllReduce.forward": [
        (r'''    def forward(ctx, x, group=None):
        out = x.contiguous().clone()
        dist.all_reduce(out, group=group)
''',
         r'''    def forward(ctx, x, group=None):
        ctx.group = group
        out = x.contiguous().clone()
        dist.all_reduce(out, group=group)
'''),
    ],
}
