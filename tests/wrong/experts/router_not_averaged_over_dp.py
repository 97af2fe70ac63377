r"""The router is averaged over the EP group only: its data-parallel replicas drift apart.

EXPECT: train_step_ep_dp.*router.*ALL ranks
CLASS: forgotten-collective values
WORLD_SIZES: 2 4
ONLY: train_step_ep_dp
"""

EDITS = {
    "sync_gradients": [
        (r'''            dist.all_reduce(p.grad, group=model.group)
            if dp_group is not None:
                dist.all_reduce(p.grad, group=dp_group)
            p.grad /= world * replicas
''',
         r'''            dist.all_reduce(p.grad, group=model.group)
            p.grad /= world
'''),
    ],
}
