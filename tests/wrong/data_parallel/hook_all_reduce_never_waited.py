r"""The hook starts its all-reduce with async_op=True and never waits on the work: the gradient
may still be changing when backward returns and the optimizer reads it.

EXPECT: \[E1\.2\] data_parallel\.DataParallel .*backward/works started with async_op=True and never waited is \['all_reduce at data_parallel\.py:\d+ in _on_grad'.*hint: rule 'Communication': a work started with async_op=True in backward \(in a hook\) was never waited
CLASS: unwaited
WORLD_SIZES: 2
ONLY: DataParallel
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "DataParallel._on_grad": [
        (r'''        dist.all_reduce(p.grad, group=self.group)
        p.grad /= dist.get_world_size(self.group)
''',
         r'''        dist.all_reduce(p.grad, group=self.group, async_op=True)   # overlap with backward
        p.grad /= dist.get_world_size(self.group)
'''),
    ],
}
