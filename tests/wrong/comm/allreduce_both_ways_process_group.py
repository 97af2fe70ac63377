r"""AllReduce also all-reduces in backward, through the process group's own method
(pg.allreduce, below torch.distributed's functions): recorded all the same.

EXPECT: AllReduce.*backward.*ProcessGroup\.allreduce
CLASS: traffic
WORLD_SIZES: 2
"""

# The bug, as edits of the reference solution (solutions/comm.py):
EDITS = {
    "AllReduce.backward": [
        (r'''    def backward(ctx, grad):
        return grad, None
''',
         r'''    def backward(ctx, grad):
        grad = grad.clone()
        dist.group.WORLD.allreduce([grad]).wait()
        return grad, None
'''),
    ],
}
