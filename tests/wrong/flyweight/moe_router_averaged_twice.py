r"""Averages the router's gradient in FlyweightMoE as well as in RotatedTensorParallel's hooks.

EXPECT: flyweight\.MoE .*phase backward.*all_reduce.*backward's only collective: the all_reduce of the replicated parameters' gradients \(one each\)
CLASS: traffic
WORLD_SIZES: 2
ONLY: MoE

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

BASE = "simple"

# the mean of equal means is the mean: the values stay right, the traffic doubles
EDITS = {
    "FlyweightWrapper.__init__": [
        (r'''                if key.startswith(whole):
                    dist.broadcast(p, src=src, group=group)
''',
         r'''                if key.startswith(whole):
                    dist.broadcast(p, src=src, group=group)

                    def average(q, world=self.world):
                        dist.all_reduce(q.grad, group=group)
                        q.grad.div_(world)
                    p.register_post_accumulate_grad_hook(average)
'''),
    ],
}
