r"""sync_gradients packs every gradient into one flat buffer made with torch.zeros(n, device=...):
float32, the default dtype, so float64 gradients come back rounded to float32. Which phase
shows it first varies from run to run (a float32 rounding falls within float64's tolerance for
some entries): the gradients, an Adam step or an SGD step.

EXPECT: train_2d_bert .*(sync/grad|step\d (adam|sgd)/).*rule 'Dtypes'
SAYS: value.float32
CLASS: dtype
RULE: Dtypes
WORLD_SIZES: 4
ONLY: train_2d_bert
"""

# The bug, as edits of the reference solution (solutions/groups.py):
EDITS = {
    "sync_gradients": [
        (r'''    data_parallel.average_gradients(model, group=groups.dp_group)
''',
         r'''    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.zeros(sum(g.numel() for g in grads), device=grads[0].device)
    offset = 0
    for g in grads:
        flat[offset:offset + g.numel()] = g.reshape(-1)
        offset += g.numel()
    dist.all_reduce(flat, group=groups.dp_group)
    flat /= groups.dp_size
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
'''),
    ],
}
