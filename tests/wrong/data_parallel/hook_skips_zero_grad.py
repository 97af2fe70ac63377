r"""The hook skips the all-reduce of a gradient that is zero on this rank ("nothing to add"):
the other ranks wait in an all-reduce this rank never makes.

EXPECT: data_parallel\.DataParallel_frozen_accumulated .*(deadlock|did not match|never finish).*(skipped it \(every rank makes the same collectives whatever its data|a rank that skips a zero gradient)
CLASS: deadlock zero-data
WORLD_SIZES: 2
ONLY: DataParallel_frozen_accumulated
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "DataParallel._on_grad": [
        (r'''        dist.all_reduce(p.grad, group=self.group)
        p.grad /= dist.get_world_size(self.group)
''',
         r'''        if p.grad.any():                     # a zero gradient adds nothing to the sum
            dist.all_reduce(p.grad, group=self.group)
        p.grad /= dist.get_world_size(self.group)
'''),
    ],
}
