r"""FSDP reduce-scatters every unit's full gradient in one callback queued on the autograd
engine at the end of backward (a per-backward flag, reset by the callback), not in the
post-accumulate-grad hook, which only frees the gathered parameters."""
EDITS = {
    "_Unit._after_backward": [
        (r'''    def _after_backward(self, full):
        grad = self.shard.new_empty(self.shard.numel())''',
         r'''    def _after_backward(self, full):
        self.free()

    def reduce_grad(self):
        full = self.full
        if full.grad is None:
            return
        grad = self.shard.new_empty(self.shard.numel())'''),
    ],
    "_Unit._before_backward": [
        (r'''    def _before_backward(self, module, grad_output):
        self.wait_gathered()''',
         r'''    def _before_backward(self, module, grad_output):
        if not self.owner.queued:
            self.owner.queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self.owner.finish)
        self.wait_gathered()'''),
    ],
    "FullyShardedDataParallel.__init__": [
        (r'''        self.shards = nn.ParameterList()
        self.units = []''',
         r'''        self.shards = nn.ParameterList()
        self.units, self.queued = [], False'''),
    ],
    "FullyShardedDataParallel.forward": [
        (r'''    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)''',
         r'''    def finish(self):
        self.queued = False
        for unit in reversed(self.units):
            unit.reduce_grad()

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)'''),
    ],
}
