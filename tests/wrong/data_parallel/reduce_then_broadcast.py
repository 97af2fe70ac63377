r"""average_gradients reduces to rank 0 and broadcasts back: the right numbers, but two
collectives per gradient where the rule allows one all-reduce.

EXPECT: average_gradients.*backward: 8 collective call\(s\), expected between 1 and 4.*rule 'Communication': a backward all-reduces each gradient at most once
CLASS: traffic
WORLD_SIZES: 2
ONLY: average_gradients
RULE: Communication
"""
EDITS = {
    "average_gradients": [
        (r'''            dist.all_reduce(p.grad, group=group)
            p.grad /= world''',
         r'''            root = dist.get_global_rank(group, 0) if group is not None else 0
            dist.reduce(p.grad, dst=root, group=group)
            dist.broadcast(p.grad, src=root, group=group)
            p.grad /= world'''),
    ],
}
