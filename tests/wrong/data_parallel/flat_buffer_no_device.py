r"""average_gradients packs the gradients into a flat buffer made with torch.zeros(n, dtype=...)
and no device: on a GPU run the buffer is in CPU memory and NCCL refuses it (on CPU every
tensor is on the same device, so only the rule 'Device' shows it).

EXPECT: all_reduce was given a \[\d+\] float64 tensor made without a device \(at data_parallel.py:\d+ in average_gradients\).*rule 'Device'
SAYS: exception.device
CLASS: device
WORLD_SIZES: 2
ONLY: average_gradients
RULE: Device
"""
EDITS = {
    "average_gradients": [
        (r'''    world = dist.get_world_size(group)
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)
            p.grad /= world''',
         r'''    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.zeros(sum(g.numel() for g in grads), dtype=grads[0].dtype)
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
