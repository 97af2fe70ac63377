"""sync_gradients all-reduces every gradient in ONE flat buffer over the DP group (then
copies the averaged pieces back) instead of one all-reduce per parameter."""
EDITS = {
    "sync_gradients": [
        (r'''    data_parallel.average_gradients(model, group=groups.dp_group)
''',
         r'''    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=groups.dp_group)
    flat /= groups.dp_size
    for g, piece in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(piece.view_as(g))
'''),
    ],
}
