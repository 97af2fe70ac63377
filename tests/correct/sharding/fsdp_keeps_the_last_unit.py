"""FullyShardedDataParallel keeps the LAST unit gathered after forward (backward needs it
first: FSDP2 does the same for its root), so backward gathers one unit less; still at most
two gathered units at a time."""
EDITS = {
    "_Unit._after_forward": [
        (r'''    def _after_forward(self, module, args, output):
        self.free()
''',
         r'''    def _after_forward(self, module, args, output):
        if self._neighbour(+1) is not None or not torch.is_grad_enabled():
            self.free()
'''),
    ],
}
