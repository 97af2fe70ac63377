r"""The hook averages this backward's own gradient (kept by a tensor hook) and assigns it to p.grad: a second backward pass without zero_grad overwrites the first instead of adding to it.

EXPECT: FAIL  \[E1\.2\] data_parallel\.DataParallel_frozen_accumulated 
SAYS: data_parallel.DataParallel_frozen_accumulated:backward/grad
CLASS: values accumulation
WORLD_SIZES: 2
ONLY: DataParallel_frozen_accumulated
RULE: Accumulation

A wrong implementation: solutions/data_parallel.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "DataParallel.__init__": [
        (r'''            if p.requires_grad:
                p.register_post_accumulate_grad_hook(self._on_grad)
''',
         r'''            if p.requires_grad:
                p.register_hook(lambda g, p=p: setattr(p, "_local", g))  # this backward's own
                p.register_post_accumulate_grad_hook(self._on_grad)
'''),
    ],
    "DataParallel._on_grad": [
        (r'''        dist.all_reduce(p.grad, group=self.group)
        p.grad /= dist.get_world_size(self.group)
''',
         r'''        g = p._local.clone()
        dist.all_reduce(g, group=self.group)
        p.grad = g / dist.get_world_size(self.group)
'''),
    ],
}
