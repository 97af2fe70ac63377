"""DataParallel: ranks other than 0 wait to receive rank 0's weights, but rank 0 never sends them (a deadlock).

EXPECT: DataParallel.*deadlock: the check did not finish in time.*rank 1 waited in recv called from data_parallel.py:\d+
WORLD_SIZES: 2
"""
import torch
import torch.distributed as dist
from torch import nn


def average_gradients(model, group=None):
    """Replace every parameter's .grad with its mean over the ranks of `group`."""
    world = dist.get_world_size(group)
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)
            p.grad /= world


class DataParallel(nn.Module):
    """Start from rank 0's weights; after backward, gradients are averaged over ranks."""

    def __init__(self, module, group=None):
        super().__init__()
        self.module = module
        self.group = group
        src = dist.get_global_rank(group, 0) if group is not None else 0
        with torch.no_grad():
            if dist.get_rank(group) != 0:
                for t in list(module.parameters()) + list(module.buffers()):
                    dist.recv(t, src=src, group=group)
        self._pending = 0
        for p in module.parameters():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(self._on_grad)

    def _on_grad(self, p):
        # Average each gradient once it is complete; hooks fire in the same order on every rank.
        dist.all_reduce(p.grad, group=self.group)
        p.grad /= dist.get_world_size(self.group)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)
