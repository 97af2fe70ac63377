"""average_gradients divides each gradient by N before the all-reduce.
"""
REPLACE = [
    ("""            dist.all_reduce(p.grad, group=group)
            p.grad /= world""",
     """            p.grad.div_(world)
            dist.all_reduce(p.grad, group=group)"""),
]
