"""f's backward and g's forward through the process group's own methods (pg.allreduce,
pg.allgather), which torch.distributed's functions call: the same operations, recorded as
such (rule 'Communication': any API of the same operation will do)."""
EDITS = {
    "Duplication.backward": [
        (r'''        dist.all_reduce(grad, group=ctx.group)''',
         r'''        pg = ctx.group if ctx.group is not None else dist.group.WORLD
        pg.allreduce([grad]).wait()'''),
    ],
    "AllReduce.forward": [
        (r'''        dist.all_reduce(out, group=group)''',
         r'''        (group if group is not None else dist.group.WORLD).allreduce([out]).wait()'''),
    ],
}
