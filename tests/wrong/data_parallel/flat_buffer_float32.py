"""average_gradients packs the gradients into a flat buffer made with torch.zeros(n, device=...):
float32, while the gradients are float64, so the averages come back with float32 precision.

SAYS: value.float32; value.dtypes
CLASS: dtype
WORLD_SIZES: 2
ONLY: average_gradients
RULE: Dtypes
"""
EDITS = {
    "average_gradients": [
        (r'''    world = dist.get_world_size(group)
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)
            p.grad /= world''',
         r'''    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.zeros(sum(g.numel() for g in grads), device=grads[0].device)
    offset = 0
    for g in grads:
        flat[offset:offset + g.numel()] = g.reshape(-1)
        offset += g.numel()
    dist.all_reduce(flat, group=group)
    flat /= dist.get_world_size(group)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()'''),
    ],
}
