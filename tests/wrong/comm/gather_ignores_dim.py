"""AllGather always concatenates along the last dimension, whatever `dim` is.

EXPECT: AllGather.*dim=0
WORLD_SIZES: 2
"""
import torch
import torch.distributed as dist


def _world(group):
    return dist.get_world_size(group), dist.get_rank(group)


class Duplication(torch.autograd.Function):
    """f: identity forward, all-reduce (sum) of the gradient backward."""

    @staticmethod
    def forward(ctx, x, group=None):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class AllReduce(torch.autograd.Function):
    """g: all-reduce (sum) forward, identity backward."""

    @staticmethod
    def forward(ctx, x, group=None):
        out = x.contiguous().clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class AllGather(torch.autograd.Function):
    """Concatenate every rank's tensor along `dim`; backward keeps this rank's slice."""

    @staticmethod
    def forward(ctx, x, dim=-1, group=None):
        world, rank = _world(group)
        ctx.dim, ctx.rank, ctx.size = dim, rank, x.shape[dim]
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx, grad):
        return grad.narrow(ctx.dim, ctx.rank * ctx.size, ctx.size).contiguous(), None, None


class Split(torch.autograd.Function):
    """Keep this rank's slice along `dim`; backward all-gathers the gradient."""

    @staticmethod
    def forward(ctx, x, dim=-1, group=None):
        world, rank = _world(group)
        if x.shape[dim] % world:
            raise ValueError(f"split: size {x.shape[dim]} of dim {dim} is not divisible by the world size {world}")
        ctx.dim, ctx.group = dim, group
        size = x.shape[dim] // world
        return x.narrow(dim, rank * size, size).contiguous()

    @staticmethod
    def backward(ctx, grad):
        world, _ = _world(ctx.group)
        parts = [torch.empty_like(grad) for _ in range(world)]
        dist.all_gather(parts, grad.contiguous(), group=ctx.group)
        return torch.cat(parts, dim=ctx.dim), None, None


def duplicate(x, group=None):
    return Duplication.apply(x, group)


def all_reduce(x, group=None):
    return AllReduce.apply(x, group)


def all_gather(x, dim=-1, group=None):
    return AllGather.apply(x, dim, group)


def split(x, dim=-1, group=None):
    return Split.apply(x, dim, group)
