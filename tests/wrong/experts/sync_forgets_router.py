r"""sync_gradients divides the router's gradient by N without all-reducing it first.

EXPECT: sync_gradients.*router.*all-reduce
CLASS: forgotten-collective values
WORLD_SIZES: 2
ONLY: sync_gradients
"""

EDITS = {
    "sync_gradients": [
        (r'''            dist.all_reduce(p.grad, group=model.group)
            if dp_group is not None:
                dist.all_reduce(p.grad, group=dp_group)
            p.grad /= world * replicas
''',
         r'''            if dp_group is not None:
                dist.all_reduce(p.grad, group=dp_group)
            p.grad /= world * replicas
'''),
    ],
}
