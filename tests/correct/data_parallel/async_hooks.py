"""DataParallel's hooks start each all-reduce asynchronously; a hook on the loss's backward
end waits for them all (overlap of communication with the rest of backward)."""
EDITS = {
    "DataParallel._on_grad": [
        (r'''    def _on_grad(self, p):
        # Average each gradient once it is complete; hooks fire in the same order on every rank.
        dist.all_reduce(p.grad, group=self.group)
        p.grad /= dist.get_world_size(self.group)''',
         r'''    def _on_grad(self, p):
        # Start the all-reduce now; wait for every one when backward has finished.
        if not getattr(self, "_handles", None):
            self._handles = []
            torch.autograd.Variable._execution_engine.queue_callback(self._finish)
        self._handles.append((p, dist.all_reduce(p.grad, group=self.group, async_op=True)))

    def _finish(self):
        for p, handle in self._handles:
            handle.wait()
            p.grad /= dist.get_world_size(self.group)
        self._handles = []'''),
    ],
}
