r"""sync_gradients leaves the experts' summed gradients undivided (N times too large).

EXPECT: sync_gradients.*expert \d+.*divide by the number of ranks
CLASS: values
WORLD_SIZES: 2 3
ONLY: sync_gradients
"""

REPLACE = [
    (r'''            if dp_group is not None:
                dist.all_reduce(p.grad, group=dp_group)
            p.grad /= world * replicas


def train_step''',
     r'''            if dp_group is not None:
                dist.all_reduce(p.grad, group=dp_group)
                p.grad /= replicas


def train_step'''),
]
