"""average_gradients divides each gradient by N before the all-reduce.
"""
EDITS = {
    "average_gradients": [
        (r'''            dist.all_reduce(p.grad, group=group)
            p.grad /= world''',
         r'''            p.grad.div_(world)
            dist.all_reduce(p.grad, group=group)'''),
    ],
}
