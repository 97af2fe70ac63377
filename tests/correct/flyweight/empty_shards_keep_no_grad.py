"""A shard with no elements (another shard's experts, the bias only shard 0 holds) keeps
.grad None: an optimizer steps it exactly as an empty gradient."""
EDITS = {
    "FlyweightWrapper._receive_grad": [
        (r'''            if p.requires_grad:
                p.grad = g if p.grad is None else p.grad.add_(g)
''',
         r'''            if p.requires_grad and p.numel():
                p.grad = g if p.grad is None else p.grad.add_(g)
'''),
    ],
}
