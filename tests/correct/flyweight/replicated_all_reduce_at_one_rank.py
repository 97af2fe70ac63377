"""The stub's design that all-reduces the replicated gradients at any world size, one rank
included (an all-reduce over one rank changes nothing, and the stub does not forbid it)."""
BASE = "simple"
EDITS = {
    "RotatedTensorParallel._average_gradient": [
        (r'''        world = dist.get_world_size(self.group)
        if world > 1:
            dist.all_reduce(p.grad, group=self.group)
            p.grad /= world''',
         r'''        world = dist.get_world_size(self.group)
        dist.all_reduce(p.grad, group=self.group)
        p.grad /= world'''),
    ],
}
