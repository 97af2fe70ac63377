r"""DataParallel averages the gradients in one go once every trainable parameter's hook has fired: with a parameter forward does not use, that never happens, and the gradients stay local.

EXPECT: FAIL  \[E1\.2\] data_parallel\.DataParallel_frozen_accumulated .*backward 1: 0 collective call\(s\).*hint: rule 'Communication': each backward averages the gradients of the parameters it computed.*nothing may wait for it
CLASS: values
WORLD_SIZES: 2
ONLY: DataParallel_frozen_accumulated

A wrong implementation: solutions/data_parallel.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "DataParallel._on_grad": [
        (r'''    def _on_grad(self, p):
        # Average each gradient once it is complete; hooks fire in the same order on every rank.
        dist.all_reduce(p.grad, group=self.group)
        p.grad /= dist.get_world_size(self.group)
''',
         r'''    def _on_grad(self, p):
        # a bucket: average everything once every trainable parameter has its gradient
        self._ready = getattr(self, "_ready", []) + [p]
        if len(self._ready) == sum(q.requires_grad for q in self.module.parameters()):
            for q in self._ready:
                dist.all_reduce(q.grad, group=self.group)
                q.grad /= dist.get_world_size(self.group)
            self._ready = []
'''),
    ],
}
