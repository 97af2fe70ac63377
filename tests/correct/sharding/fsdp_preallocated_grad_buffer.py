r"""FSDP accumulates into a gradient buffer preallocated per unit at construction: shard.grad is
that buffer, zeroed when zero_grad has set .grad to None."""
EDITS = {
    "_Unit.__init__": [
        (r'''        self.handle, self.ready = None, False
        module.register_forward_pre_hook''',
         r'''        self.handle, self.ready = None, False
        self.grad_buffer = torch.zeros_like(self.shard)
        module.register_forward_pre_hook'''),
    ],
    "_Unit._after_backward": [
        (r'''        grad = self.shard.new_empty(self.shard.numel())
        dist.reduce_scatter_tensor(grad, full.grad, group=self.owner.group)
        grad.div_(self.owner.world)
        if self.shard.grad is None:
            self.shard.grad = grad
        else:
            self.shard.grad += grad
''',
         r'''        grad = self.shard.new_empty(self.shard.numel())
        dist.reduce_scatter_tensor(grad, full.grad, group=self.owner.group)
        if self.shard.grad is None:
            self.grad_buffer.zero_()
            self.shard.grad = self.grad_buffer
        self.shard.grad.add_(grad, alpha=1.0 / self.owner.world)
'''),
    ],
}
