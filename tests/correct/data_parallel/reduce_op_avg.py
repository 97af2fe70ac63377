"""average_gradients and the hooks average with one all_reduce(op=ReduceOp.AVG), as NCCL
offers; gloo lacks AVG, so the checker runs it on CPU as NCCL would (a sum, then a division):
the same grade on CPU and GPU."""
EDITS = {
    "average_gradients": [
        (r'''            dist.all_reduce(p.grad, group=group)
            p.grad /= world''',
         r'''            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=group)'''),
    ],
    "DataParallel._on_grad": [
        (r'''        dist.all_reduce(p.grad, group=self.group)
        p.grad /= dist.get_world_size(self.group)''',
         r'''        dist.all_reduce(p.grad, dist.ReduceOp.AVG, self.group)'''),
    ],
}
