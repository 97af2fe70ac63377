"""f's backward and g's forward through torch's functional collectives (out of place, waited
when the result is used), as DTensor does."""
EDITS = {
    "Duplication.backward": [
        (r'''        dist.all_reduce(grad, group=ctx.group)''',
         r'''        import torch.distributed._functional_collectives as funcol
        grad = funcol.all_reduce(grad, "sum", ctx.group if ctx.group is not None else dist.group.WORLD)
        grad = funcol.wait_tensor(grad)'''),
    ],
}
