"""Inputs and training loops shared by both halves of a check.

Everything here is a pure function of its arguments (seeds, world size,
rank, and for a rank's own data its owner's key: `inputs`), so the parent can
rebuild exactly what each worker fed to the code under test and compute the
serial answer, and a rank can draw only its own.
"""
from __future__ import annotations

import torch
from torch import nn

from rtp_course.checker import inputs
from rtp_course.runtime import devices

DTYPE = torch.float64


def _asked(what: str, seed: int, shape, owner, **extra) -> torch.Tensor:
    """A rank's own data, from the parent (checker.inputs: it holds no key)."""
    _, tensors = inputs.ask({"what": what, "seed": seed, "shape": [int(d) for d in shape],
                             "owner": inputs.label(owner), **extra})
    # made as a local draw would be (a factory without a device: rule 'Device' sees the same)
    return torch.empty(tuple(shape), dtype=tensors[0].dtype).copy_(tensors[0])


def randn(seed: int, *shape, dtype=DTYPE, owner: int | None = None) -> torch.Tensor:
    """Normal samples from `seed`; `owner`: the global rank whose own data this is (only that
    rank and the parent can draw it), None for data every rank shares."""
    if owner is not None and inputs.in_rank():
        return _asked("randn", seed, shape, owner, dtype=str(dtype).replace("torch.", ""))
    g = torch.Generator().manual_seed(inputs.seed(seed, owner))
    return torch.randn(*shape, generator=g, dtype=dtype)


def rand(seed: int, *shape, dtype=DTYPE, owner: int | None = None) -> torch.Tensor:
    """Uniform samples in [0, 1) from `seed` (and `owner`'s key: see randn)."""
    if owner is not None and inputs.in_rank():
        return _asked("rand", seed, shape, owner, dtype=str(dtype).replace("torch.", ""))
    g = torch.Generator().manual_seed(inputs.seed(seed, owner))
    return torch.rand(*shape, generator=g, dtype=dtype)


def randint(seed: int, high: int, *shape, owner: int | None = None) -> torch.Tensor:
    if owner is not None and inputs.in_rank():
        return _asked("randint", seed, shape, owner, high=int(high))
    g = torch.Generator().manual_seed(inputs.seed(seed, owner))
    return torch.randint(0, high, shape, generator=g)


def manual_seed(seed: int, owner: int | None = None) -> None:
    """torch.manual_seed, minus its cost where CUDA cannot be used: there it also queues a CUDA
    seed with the formatted call stack, ~0.4 ms a call for nothing (a check run makes ~1000).
    GPUs are counted without initialising CUDA: the warm server seeds, then forks the ranks."""
    seed = inputs.seed(seed, owner)
    if devices.gpu_count() > 0:
        torch.manual_seed(seed)
    else:
        torch.random.default_generator.manual_seed(seed)


def seeded(factory, seed: int, dtype=DTYPE, owner: int | None = None) -> nn.Module:
    """factory() with parameters drawn from `seed` (and `owner`'s key: see randn), in `dtype`."""
    manual_seed(seed, owner)
    return factory().to(dtype)


def owned_module(check, builder: str, seed: int, owner, dtype=DTYPE) -> nn.Module:
    """The module `check.<builder>()` builds, with parameters drawn from `seed` and the
    key of `owner` (a global rank or a set of them): what `seeded` makes, for a module that
    is a rank's own. `builder` must be listed in the check class's `owned`. A rank holds no
    key: it builds the module's shape and gets its values from the parent, which builds it
    the same way (checker/provider.py)."""
    build = check
    for name in builder.split("."):
        build = getattr(build, name)
    if not inputs.in_rank():
        return seeded(build, seed, dtype, owner)
    reply, tensors = inputs.ask({"what": "module", "check": check.id, "builder": builder,
                                 "seed": seed, "owner": inputs.label(owner),
                                 "dtype": str(dtype).replace("torch.", "")})
    module = seeded(build, seed, dtype)                       # the shape; values follow
    module.load_state_dict(dict(zip(reply.get("names", []), tensors)), strict=True)
    return module


def rank_slice(t: torch.Tensor, rank: int, world_size: int, dim: int = 0) -> torch.Tensor:
    """Rank r's piece of a global batch: the r-th of world_size equal contiguous chunks."""
    return t.chunk(world_size, dim=dim)[rank]


def global_randn(seed: int, rows: int, *shape, owners) -> torch.Tensor:
    """A batch of `rows` rows whose pieces each owner drew for itself (parent only): owner o's
    is randn(seed, rows // len(owners), *shape, owner=o), in the order of `owners`."""
    return torch.cat([randn(seed, rows // len(owners), *shape, owner=o) for o in owners])


def make_optimizer(name: str, params, lr: float = 0.05, eps: float = 1e-8):
    """SGD with momentum, or Adam. Adam's default eps turns ~1e-17 rounding noise on
    zero-gradient entries into O(lr) updates: checks comparing such entries pass eps=1e-6."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr * 0.2, eps=eps)
    raise ValueError(name)


def mlp(in_dim=8, hidden=12, out_dim=6) -> nn.Module:
    """A small MLP for exercises that do not need a transformer."""
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.Tanh(), nn.Linear(hidden, out_dim))


def named_grads(model: nn.Module) -> dict:
    return {n: (p.grad.detach().clone() if p.grad is not None else None)
            for n, p in model.named_parameters()}


def named_params(model: nn.Module) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters()}
