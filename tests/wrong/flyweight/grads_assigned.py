r"""The shard's gradient that comes home is assigned to .grad instead of added to it: a second
backward without zero_grad forgets the first (autograd adds, for every other parameter).

EXPECT: flyweight\.FlyweightWrapper .*backward 2/grad weight shard, summed over both passes max abs error.*hint: rule 'Accumulation'
CLASS: values accumulation
RULE: Accumulation
WORLD_SIZES: 2
ONLY: FlyweightWrapper
"""

# The bug, as edits of the reference solution (solutions/flyweight.py):
EDITS = {
    "FlyweightWrapper._receive_grad": [
        (r'''                p.grad = g if p.grad is None else p.grad.add_(g)
''',
         r'''                p.grad = g
'''),
    ],
}
