r"""DataParallel registers its gradient hooks in forward: after the second forward every
gradient is all-reduced twice per step (the values stay right: only the traffic shows it).

EXPECT: DataParallel .*step2 sgd: 8 collective call\(s\), expected at most 4.*hooks are registered once, in the constructor
CLASS: traffic per-call-state
WORLD_SIZES: 2
ONLY: DataParallel
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "DataParallel.__init__": [
        (r'''        self._pending = 0
        for p in module.parameters():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(self._on_grad)
''',
         r''''''),
    ],
    "DataParallel.forward": [
        (r'''    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)''',
         r'''    def forward(self, *args, **kwargs):
        for p in self.module.parameters():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(self._on_grad)
        return self.module(*args, **kwargs)'''),
    ],
}
