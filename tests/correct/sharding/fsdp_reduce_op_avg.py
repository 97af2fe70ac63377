"""FullyShardedDataParallel reduce-scatters each unit's gradient with ReduceOp.AVG (the mean
over the ranks in one call) instead of a sum followed by a division."""
EDITS = {
    "_Unit._after_backward": [
        (r'''        dist.reduce_scatter_tensor(grad, full.grad, group=self.owner.group)
        grad.div_(self.owner.world)
''',
         r'''        dist.reduce_scatter_tensor(grad, full.grad, op=dist.ReduceOp.AVG,
                                   group=self.owner.group)
'''),
    ],
}
