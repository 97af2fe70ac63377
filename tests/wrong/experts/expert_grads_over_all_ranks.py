r"""sync_gradients all-reduces the experts' gradients over model.group, mixing different experts.

EXPECT: sync_gradients.*expert \d+.*never over model.group
CLASS: values traffic
WORLD_SIZES: 2
ONLY: sync_gradients
"""

EDITS = {
    "sync_gradients": [
        (r'''    for p in model.experts.parameters():
        if p.grad is not None:
            if dp_group is not None:
''',
         r'''    for p in model.experts.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=model.group)
            if dp_group is not None:
'''),
    ],
}
