"""sync_gradients averages with ReduceOp.AVG on each group (the router over model.group, then
dp_group; the experts over dp_group, then divided by N) instead of sums and one division.
"""
EDITS = {
    "sync_gradients": [
        (r'''    for p in model.router.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=model.group)
            if dp_group is not None:
                dist.all_reduce(p.grad, group=dp_group)
            p.grad /= world * replicas
    for p in model.experts.parameters():
        if p.grad is not None:
            if dp_group is not None:
                dist.all_reduce(p.grad, group=dp_group)
            p.grad /= world * replicas
''',
         r'''    for p in model.router.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=model.group)
            if dp_group is not None:
                dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=dp_group)
    for p in model.experts.parameters():
        if p.grad is not None:
            if dp_group is not None:
                dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=dp_group)
            p.grad /= world
'''),
    ],
}
