"""The serial mixture-of-experts layer (given): a top-k softmax router, E expert MLPs, a
capacity per expert with dropped tokens, and the load-balancing auxiliary loss.

Exercise E10 (rtp_course/experts.py) spreads the experts over ranks; this layer is what its
results are compared with. Every choice that decides a token's fate is deterministic, so an
expert-parallel layer can reproduce it exactly:

    probs  = softmax(x @ W_router^T + b_router)             [T, E]
    gate, expert = probs.topk(k)                             [T, k], choice 0 the largest
    capacity C = ceil(capacity_factor * T * k / E)           (capacity_factor None: no limit)
    slot: an expert's queue takes all FIRST choices in token order, then all second choices
          in token order; an assignment whose slot is >= C is DROPPED (it adds nothing)
    y[t] = sum over kept choices j of gate[t, j] * expert_{expert[t, j]}(x[t])
    aux  = E * sum_e f_e * P_e   f_e: share of the T*k choices (dropped ones too) made for e
                                 P_e: mean router probability of e over the T tokens

The gates are the raw top-k probabilities (not renormalised), so the router learns through
them (and through aux). A dropped token's output is zero here: the residual around the layer
carries it in a model. Every expert is called, on an empty batch if nothing reaches it, so
every expert gets a gradient (zeros when it saw no token).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn


class Expert(nn.Module):
    """One expert: a two-layer MLP dim -> hidden -> dim with tanh."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


class Routing(NamedTuple):
    """Where each of the T tokens' k choices goes: all [T, k]."""
    expert: torch.Tensor    # long: the chosen expert
    gate: torch.Tensor      # the choice's probability (differentiable)
    keep: torch.Tensor      # bool: slot < capacity
    slot: torch.Tensor      # long: the choice's place in its expert's queue


def capacity(tokens: int, num_experts: int, top_k: int, capacity_factor) -> int | None:
    """C = ceil(capacity_factor * tokens * top_k / num_experts); None: no limit."""
    if capacity_factor is None:
        return None
    return math.ceil(capacity_factor * tokens * top_k / num_experts)


def route(probs: torch.Tensor, top_k: int, cap: int | None) -> Routing:
    """The top-k choices of each row of probs [T, E], their slots and which are kept."""
    gate, expert = probs.topk(top_k, dim=-1)
    T, E = probs.shape
    choices = expert.t().reshape(-1)                        # first choices first, token order
    queue = F.one_hot(choices, E).cumsum(0) - 1             # place in each expert's queue
    slot = queue.gather(1, choices.unsqueeze(1)).view(top_k, T).t()
    keep = torch.ones_like(slot, dtype=torch.bool) if cap is None else slot < cap
    return Routing(expert, gate, keep, slot)


def load_balancing_loss(probs: torch.Tensor, expert: torch.Tensor) -> torch.Tensor:
    """Switch Transformer's aux loss: E * sum_e f_e * P_e (f_e counts dropped choices too)."""
    E = probs.shape[-1]
    f = torch.bincount(expert.reshape(-1), minlength=E).to(probs.dtype) / expert.numel()
    return E * (f * probs.mean(0)).sum()


class MoE(nn.Module):
    """The serial layer: forward(x [..., dim]) -> (y [..., dim], aux loss [])."""

    def __init__(self, dim: int = 6, hidden: int = 8, num_experts: int = 12, top_k: int = 1,
                 capacity_factor: float | None = 1.25):
        super().__init__()
        self.dim, self.num_experts, self.top_k = dim, num_experts, top_k
        self.capacity_factor = capacity_factor
        self.router = nn.Linear(dim, num_experts)
        self.experts = nn.ModuleList(Expert(dim, hidden) for _ in range(num_experts))

    def routing(self, x: torch.Tensor):
        """(probs [T, E], Routing) for the tokens x [T, dim]."""
        probs = torch.softmax(self.router(x), dim=-1)
        cap = capacity(x.shape[0], self.num_experts, self.top_k, self.capacity_factor)
        return probs, route(probs, self.top_k, cap)

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs, r = self.routing(x)
        y = x.new_zeros(x.shape)
        for e, expert in enumerate(self.experts):
            t, j = torch.nonzero((r.expert == e) & r.keep, as_tuple=True)
            y = y.index_add(0, t, r.gate[t, j].unsqueeze(1) * expert(x[t]))
        return y.reshape(shape), load_balancing_loss(probs, r.expert)
