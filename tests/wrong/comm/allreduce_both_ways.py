"""AllReduce also all-reduces in backward (an all-reduce in both directions).

EXPECT: AllReduce.*backward
CLASS: traffic
WORLD_SIZES: 2
RULE: Communication
"""

# The bug, as edits of the reference solution (solutions/comm.py):
EDITS = {
    "AllReduce.backward": [
        (r'''    def backward(ctx, grad):
        return grad, None
''',
         r'''    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad, None
'''),
    ],
}
