"""A model of equal blocks cut into pipeline stages, and one stage's trace: what E9's checks
and notebook 11's demos both run."""
from __future__ import annotations

import weakref

import torch
from torch import nn

WIDTH = 8                       # every block maps [b, 8] to [b, 8]


def blocks(num_layers: int = 6, width: int = WIDTH) -> nn.Sequential:
    """L blocks Linear(width, width) + Tanh (smooth: no kink for float32 rounding to cross).
    The checks use width 8; the benchmark's pipeline rows, its model's hidden size."""
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh())
                           for _ in range(num_layers)])


def cut(rank: int, world: int, num_layers: int) -> tuple:
    """The rule 'Layout' cut: stage r of N holds blocks r*L//N .. (r+1)*L//N - 1."""
    return rank * num_layers // world, (rank + 1) * num_layers // world


class StageTrace:
    """One rank's stage seen from outside: a forward is its first block's call, a backward the
    gradient reaching its last block's output (autograd's hook), both numbered by forward; a
    micro-batch's activations are alive while anything autograd saved during its forward is
    (saved_tensors_hooks: each saved tensor's holder, freed with the graph by its backward)."""

    def __init__(self, model: nn.Sequential, start: int, stop: int):
        self.events, self.count, self.current = [], 0, None
        self.alive, self.peak = {}, 0
        self.handles = [model[start].register_forward_pre_hook(self._forward),
                        model[stop - 1].register_forward_hook(self._output)]

    def _forward(self, module, args):
        self.current, self.count = self.count, self.count + 1
        self.events.append(f"F{self.current}")

    def _output(self, module, args, out):
        i = self.current
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(lambda g: self.events.append(f"B{i}"))

    def pack(self, t):
        holder = _Held(t)
        i = self.current
        self.alive[i] = self.alive.get(i, 0) + 1
        weakref.finalize(holder, self._freed, i)
        self.peak = max(self.peak, sum(1 for n in self.alive.values() if n > 0))
        return holder

    @staticmethod
    def unpack(holder):
        return holder.t

    def _freed(self, i):
        self.alive[i] -= 1

    def saving(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def letters(self) -> str:
        return "".join(e[0] for e in self.events)

    def order(self) -> str:
        return " ".join(self.events)

    def remove(self):
        for h in self.handles:
            h.remove()


class _Held:
    __slots__ = ("t", "__weakref__")

    def __init__(self, t):
        self.t = t
