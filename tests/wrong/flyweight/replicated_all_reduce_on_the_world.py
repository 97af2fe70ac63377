r"""RTP all-reduces the replicated gradients over the whole world, not `group`: right until the model lives on a subgroup.

EXPECT: HANG  \[E5\.2\] flyweight\.TransformerLM_subgroup .*rank 1 waited in all_reduce .*rank\(s\) 0 finished this check while the others wait in all_reduce
SAYS: hang.left-out
CLASS: subgroup
WORLD_SIZES: 3
ONLY: TransformerLM_subgroup
HIDDEN: yes

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

BASE = "simple"

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
EDITS = {
    "RotatedTensorParallel._average_gradient": [
        (r'''            dist.all_reduce(p.grad, group=self.group)
''',
         r'''            dist.all_reduce(p.grad)
'''),
    ],
}
