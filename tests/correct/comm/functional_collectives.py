"""f's backward and g's forward through torch's functional collectives (out of place, waited
when the result is used), as DTensor does."""
REPLACE = [
    ("        dist.all_reduce(grad, group=ctx.group)",
     "        import torch.distributed._functional_collectives as funcol\n"
     "        grad = funcol.all_reduce(grad, \"sum\", ctx.group if ctx.group is not None else dist.group.WORLD)\n"
     "        grad = funcol.wait_tensor(grad)"),
]
