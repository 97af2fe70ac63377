r"""The replicated parameters' hook skips the all-reduce of a gradient that is zero on this
rank ("nothing to add"): the other ranks wait in an all-reduce this rank never makes.

EXPECT: flyweight\.TransformerLM .*(deadlock|never finish|did not match|collective call\(s\)).*(whatever its data|by every rank whatever its gradients)
CLASS: deadlock zero-data
WORLD_SIZES: 2
ONLY: TransformerLM
"""
BASE = "simple"

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
EDITS = {
    "RotatedTensorParallel._average_gradient": [
        (r'''        world = dist.get_world_size(self.group)
        if world > 1:
            dist.all_reduce(p.grad, group=self.group)
            p.grad /= world
''',
         r'''        world = dist.get_world_size(self.group)
        if world > 1 and p.grad.any():       # a zero gradient adds nothing to the sum
            dist.all_reduce(p.grad, group=self.group)
            p.grad /= world
'''),
    ],
}
