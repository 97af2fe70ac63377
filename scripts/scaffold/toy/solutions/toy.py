"""Reference: a toy exercise (instructor only)."""
import torch
import torch.distributed as dist


def total(x, group=None):
    """The sum of every rank's x, on every rank: one all-reduce of a copy."""
    out = x.clone()
    dist.all_reduce(out, group=group)
    return out
