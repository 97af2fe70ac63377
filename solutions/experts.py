"""Reference: mixture of experts with expert parallelism over all-to-all (instructor only)."""
import copy

import torch
import torch.distributed as dist
from torch import nn

import rtp_course.models.moe as serial


def _world(group):
    return dist.get_world_size(group), dist.get_rank(group)


class AllToAll(torch.autograd.Function):
    """Rows of x go to the ranks in order (input_splits[q] to rank q); the rows that arrive
    come in rank order (output_splits[q] from rank q). Backward sends the gradients back."""

    @staticmethod
    def forward(ctx, x, input_splits, output_splits, group=None):
        ctx.splits, ctx.group = (list(input_splits), list(output_splits)), group
        out = x.new_empty((sum(output_splits),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), list(output_splits), list(input_splits),
                               group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        input_splits, output_splits = ctx.splits
        dx = grad.new_empty((sum(input_splits),) + tuple(grad.shape[1:]))
        dist.all_to_all_single(dx, grad.contiguous(), input_splits, output_splits,
                               group=ctx.group)
        return dx, None, None, None


def all_to_all(x, input_splits, output_splits, group=None):
    return AllToAll.apply(x, input_splits, output_splits, group)


def exchange_splits(counts, group=None):
    """counts [N, m] (rows for rank q's i-th item) -> [N, m] (rows rank q sends me for mine)."""
    world, _ = _world(group)
    sent = counts.contiguous()
    received = torch.empty_like(sent)
    dist.all_to_all_single(received, sent, group=group)
    return received


class ExpertParallelMoE(nn.Module):
    """The serial MoE with its experts sharded over `group`: rank r holds experts
    [r*E/N, (r+1)*E/N); the router is replicated."""

    def __init__(self, moe, group=None):
        super().__init__()
        world, rank = _world(group)
        if moe.num_experts % world:
            raise ValueError(f"ExpertParallelMoE: {moe.num_experts} experts do not split over "
                             f"{world} ranks")
        self.group, self.num_experts, self.top_k = group, moe.num_experts, moe.top_k
        self.capacity_factor = moe.capacity_factor
        self.num_local = moe.num_experts // world
        self.first = rank * self.num_local
        self.router = copy.deepcopy(moe.router)
        self.experts = nn.ModuleList(copy.deepcopy(moe.experts[self.first + i])
                                     for i in range(self.num_local))

    def forward(self, x):
        world, _ = _world(self.group)
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = torch.softmax(self.router(x), dim=-1)
        cap = serial.capacity(x.shape[0], self.num_experts, self.top_k, self.capacity_factor)
        r = serial.route(probs, self.top_k, cap)
        t, j = torch.nonzero(r.keep, as_tuple=True)
        order = torch.argsort(r.expert[t, j], stable=True)  # by expert: by rank, then expert
        t, j = t[order], j[order]
        counts = torch.bincount(r.expert[t, j], minlength=self.num_experts)
        counts = counts.view(world, self.num_local)
        received = exchange_splits(counts, self.group)                 # [N, local]
        send, recv = counts.sum(1).tolist(), received.sum(1).tolist()
        tokens = all_to_all(x[t], send, recv, self.group)
        local = torch.arange(self.num_local, device=x.device).repeat(world)
        local = local.repeat_interleave(received.reshape(-1))         # each row's local expert
        out = tokens.new_zeros(tokens.shape)
        for i, expert in enumerate(self.experts):
            rows = torch.nonzero(local == i, as_tuple=True)[0]
            out = out.index_copy(0, rows, expert(tokens[rows]))
        back = all_to_all(out, recv, send, self.group)
        y = x.new_zeros(x.shape).index_add(0, t, r.gate[t, j].unsqueeze(1) * back)
        return y.reshape(shape), serial.load_balancing_loss(probs, r.expert)


def sync_gradients(model, dp_group=None):
    """Router: mean over every rank (EP group, then DP group); experts: sum over their
    replicas (DP group), divided by the number of ranks."""
    world, _ = _world(model.group)
    replicas = 1 if dp_group is None else dist.get_world_size(dp_group)
    for p in model.router.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=model.group)
            if dp_group is not None:
                dist.all_reduce(p.grad, group=dp_group)
            p.grad /= world * replicas
    for p in model.experts.parameters():
        if p.grad is not None:
            if dp_group is not None:
                dist.all_reduce(p.grad, group=dp_group)
            p.grad /= world * replicas


def train_step(model, optimizer, loss_fn, inputs, targets, dp_group=None, aux_weight=0.01):
    optimizer.zero_grad()
    y, aux = model(inputs)
    loss = loss_fn(y, targets) + aux_weight * aux
    loss.backward()
    sync_gradients(model, dp_group)
    optimizer.step()
    return loss.detach()
