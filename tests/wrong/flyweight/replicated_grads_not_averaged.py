r"""Leaves replicated parameters (LayerNorm, ...) with this rank's gradient: no average over ranks.

EXPECT: backward/grad layers\.0\.norm1\.\w+ \(replicated parameter\) max abs error.*all_reduce it over the group
CLASS: forgotten-collective
WORLD_SIZES: 2
ONLY: TransformerLM

A wrong implementation: solutions/flyweight.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/flyweight.py):
EDITS = {
    "RotatedTensorParallel#1.__init__": [
        (r'''        for p in self.module.parameters():
            if id(p) not in sharded and p.requires_grad:
                p.register_post_accumulate_grad_hook(self._average_gradient)
''',
         r''''''),
    ],
}
