"""sync_gradients flattens the router's gradients into one buffer (one all-reduce per group)
and the experts' into another, instead of one collective per parameter.
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
         r'''    for params, groups in ((model.router.parameters(), [model.group, dp_group]),
                           (model.experts.parameters(), [dp_group])):
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            continue
        flat = torch.cat([g.reshape(-1) for g in grads])
        for group in groups:
            if group is not None:
                dist.all_reduce(flat, group=group)
        flat /= world * replicas
        for g, part in zip(grads, flat.split([g.numel() for g in grads])):
            g.copy_(part.view_as(g))
'''),
    ],
}
