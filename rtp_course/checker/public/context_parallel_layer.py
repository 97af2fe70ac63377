"""The attention_layer check's model and optimizers: a one-layer attention block around
`attend` (serial attention in the parent, ring_attention in the ranks), and SGD and Adam
written out, the same on both sides of the check."""
from __future__ import annotations

import torch
from torch import nn


class Optimizer:
    """torch.optim.SGD(lr, momentum=0.9) or torch.optim.Adam(lr / 5, eps=1e-6) (common.
    make_optimizer's), their update rules written out: the first torch.optim optimizer a
    process makes imports torch._dynamo, 1 to 1.5 s of CPU in the parent and in every rank,
    more than all of this exercise's checks. The same rule on both sides of the check."""

    def __init__(self, name: str, params, lr: float = 0.05):
        self.name, self.params, self.lr, self.t = name, list(params), lr, 0
        self.state = [{} for _ in self.params]

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        self.t += 1
        for p, s in zip(self.params, self.state):
            if p.grad is None:
                continue
            g = p.grad
            if self.name == "sgd":
                s["buf"] = g.clone() if "buf" not in s else s["buf"].mul_(0.9).add_(g)
                p.add_(s["buf"], alpha=-self.lr)
                continue
            m = s.setdefault("m", torch.zeros_like(p)).mul_(0.9).add_(g, alpha=0.1)
            v = s.setdefault("v", torch.zeros_like(p)).mul_(0.999).addcmul_(g, g, value=0.001)
            denom = (v.sqrt() / (1 - 0.999 ** self.t) ** 0.5).add_(1e-6)
            p.addcdiv_(m, denom, value=-self.lr * 0.2 / (1 - 0.9 ** self.t))


class AttentionLayer(nn.Module):
    """A one-layer attention block: q, k, v and output projections around `attend(q, k, v)`,
    which is serial attention or ring attention over the ranks' tokens."""

    def __init__(self, embed: int = 8, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(embed, embed) for _ in range(4))

    def forward(self, x, attend):
        b, length, e = x.shape

        def split(t):            # [b, L, e] -> [b, heads, L, e / heads]
            return t.view(b, length, self.heads, e // self.heads).transpose(1, 2)

        out = attend(split(self.wq(x)), split(self.wk(x)), split(self.wv(x)))
        return self.wo(out.transpose(1, 2).reshape(b, length, e))
