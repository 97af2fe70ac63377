"""average_gradients with one flat buffer: every gradient copied into one tensor, one
all-reduce, copied back (what DDP's buckets do)."""
EDITS = {
    "average_gradients": [
        (r'''    world = dist.get_world_size(group)
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)
            p.grad /= world''',
         r'''    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    flat /= dist.get_world_size(group)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()'''),
    ],
}
