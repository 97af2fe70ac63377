"""DataParallel averages each gradient in a tensor hook (p.register_hook), before autograd
accumulates it into .grad: the older DDP-tutorial pattern.
"""
EDITS = {
    "DataParallel": [
        (r'''                p.register_post_accumulate_grad_hook(self._on_grad)

    def _on_grad(self, p):
        # Average each gradient once it is complete; hooks fire in the same order on every rank.
        dist.all_reduce(p.grad, group=self.group)
        p.grad /= dist.get_world_size(self.group)
''',
         r'''                p.register_hook(self._average)

    def _average(self, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=self.group)
        return grad / dist.get_world_size(self.group)
'''),
    ],
}
