r"""sync_gradients packs the gradients into one flat buffer made with torch.zeros(n, dtype=...)
and no device: on a GPU run it is in CPU memory and NCCL refuses it.

EXPECT: all_reduce was given a \[\d+\] float64 tensor made without a device \(at groups.py:\d+ in sync_gradients\).*hint: rule 'Device'
CLASS: device
WORLD_SIZES: 2
ONLY: train_2d_bert
RULE: Device
"""
EDITS = {
    "sync_gradients": [
        (r'''    data_parallel.average_gradients(model, group=groups.dp_group)
''',
         r'''    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.zeros(sum(g.numel() for g in grads), dtype=grads[0].dtype)
    for g, piece in zip(grads, flat.split([g.numel() for g in grads])):
        piece.copy_(g.reshape(-1))
    dist.all_reduce(flat, group=groups.dp_group)
    flat /= groups.dp_size
    for g, piece in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(piece.view_as(g))
'''),
    ],
}
