"""Notebook 12: mixture of experts (the student's `experts` module, E10) at work.

In the notebook's own process (no ranks): ``routing_table`` routes each "rank"'s tokens
through the serial layer (rtp_course/models/moe.py) and counts, per expert, the choices made,
kept and dropped; ``plot_routing`` draws them.
Workers (run with `launch` / `run_demo`):
* ``all_to_all_demo``: all_to_all with uneven splits, rows labelled by sender and receiver,
  and its backward (the gradient rows return to their senders).
* ``ep_demo``: ExpertParallelMoE on every rank's own tokens against the serial layer on the
  same tokens: output, input and parameter gradients; the rows each rank received per
  expert from each rank (the dispatch), read from the exchanged split sizes.
* ``train_demo``: a few train_step steps with expert and data parallelism against serial
  training on the mean of the ranks' losses.
Every rank builds the same serial layer from one seed (a demo's shortcut) and draws its own
tokens from its rank.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from rtp_course.course.impl import current
from rtp_course.course.todo import needs_exercises
from rtp_course.models.moe import MoE
from rtp_course.runtime.launcher import rank_device

DIM, HIDDEN = 8, 16


def make_moe(experts=8, top_k=1, capacity_factor=1.25, seed=0):
    torch.manual_seed(seed)
    return MoE(DIM, HIDDEN, experts, top_k, capacity_factor)


def tokens_of(rank, count=32, seed=100):
    return torch.randn(count, DIM, generator=torch.Generator().manual_seed(seed + rank))


def routing_table(moe, ranks=4, count=32):
    """{"chosen", "kept"}: [ranks, experts] counts of choices made and kept on each rank's
    tokens (each rank one routing group), and the capacity per expert."""
    chosen = torch.zeros(ranks, moe.num_experts, dtype=torch.long)
    kept = torch.zeros_like(chosen)
    with torch.no_grad():
        for r in range(ranks):
            _, routing = moe.routing(tokens_of(r, count))
            chosen[r] = torch.bincount(routing.expert.reshape(-1), minlength=moe.num_experts)
            kept[r] = torch.bincount(routing.expert[routing.keep], minlength=moe.num_experts)
    from rtp_course.models.moe import capacity
    return {"chosen": chosen, "kept": kept,
            "capacity": capacity(count, moe.num_experts, moe.top_k, moe.capacity_factor)}


def plot_routing(table, title=""):
    """Choices per expert per rank, kept (solid) and dropped (hatched), one panel per rank."""
    import matplotlib.pyplot as plt
    chosen, kept = table["chosen"], table["kept"]
    ranks, experts = chosen.shape
    fig, axes = plt.subplots(1, ranks, figsize=(3 * ranks, 2.6), sharey=True)
    for r, ax in enumerate(axes if ranks > 1 else [axes]):
        ax.bar(range(experts), kept[r], color="tab:blue", label="kept")
        ax.bar(range(experts), chosen[r] - kept[r], bottom=kept[r], color="white",
               edgecolor="tab:red", hatch="//", label="dropped")
        if table["capacity"] is not None:
            ax.axhline(table["capacity"], color="gray", linestyle="--", linewidth=1)
        ax.set_title(f"rank {r}'s tokens")
        ax.set_xlabel("expert")
    axes[0].set_ylabel("choices")
    axes[-1].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_dispatch(received, experts_per_rank):
    """The dispatch seen from every rank: rows received per (sending rank, own expert)."""
    import matplotlib.pyplot as plt
    ranks = len(received)
    fig, axes = plt.subplots(1, ranks, figsize=(2.6 * ranks, 2.6))
    for r, ax in enumerate(axes if ranks > 1 else [axes]):
        m = torch.tensor(received[r])
        ax.imshow(m, cmap="Blues", vmin=0)
        for (q, i), v in zip([(q, i) for q in range(m.shape[0]) for i in range(m.shape[1])],
                             m.reshape(-1).tolist()):
            ax.text(i, q, str(v), ha="center", va="center", fontsize=8)
        first = r * experts_per_rank
        ax.set_xticks(range(m.shape[1]), [str(first + i) for i in range(m.shape[1])])
        ax.set_yticks(range(m.shape[0]))
        ax.set_title(f"rank {r} receives")
        ax.set_xlabel("its expert")
    axes[0].set_ylabel("from rank")
    fig.tight_layout()
    return fig


@needs_exercises
def all_to_all_demo(rank, world_size):
    """Rank r sends q + 1 rows to rank q, each row holding 10 * r + q; backward sends rows of
    100 + the receiver back."""
    ex = current("experts")
    device = rank_device()
    send = [q + 1 for q in range(world_size)]
    recv = [rank + 1] * world_size
    x = torch.cat([torch.full((q + 1, 1), 10.0 * rank + q, device=device)
                   for q in range(world_size)]).requires_grad_(True)
    y = ex.all_to_all(x, send, recv, group=None)
    y.backward(torch.full_like(y, 100.0 + rank))
    return {"sent": x.detach().reshape(-1).tolist(), "received": y.detach().reshape(-1).tolist(),
            "grad": x.grad.reshape(-1).tolist()}


def _watch_exchange(ex):
    """Record what exchange_splits returns (the rows per sender and own expert)."""
    seen, original = [], ex.exchange_splits

    def spy(counts, group=None):
        out = original(counts, group=group)
        seen.append(out.tolist())
        return out
    return seen, original, spy


@needs_exercises
def ep_demo(rank, world_size, experts=8, top_k=2, capacity_factor=1.0):
    ex = current("experts")
    device = rank_device()
    moe = make_moe(experts, top_k, capacity_factor).double().to(device)
    seen, original, spy = _watch_exchange(ex)
    ex.exchange_splits = spy
    try:
        model = ex.ExpertParallelMoE(moe, group=None)
        x = tokens_of(rank).double().to(device).requires_grad_(True)
        y, aux = model(x)
        (y.square().sum() + aux).backward()
    finally:
        ex.exchange_splits = original
    xs = x.detach().clone().requires_grad_(True)
    ys, auxs = moe(xs)
    (ys.square().sum() + auxs).backward()
    with torch.no_grad():
        _, routing = moe.routing(x)
    return {"output error": (y - ys).abs().max().item(),
            "aux error": (aux - auxs).abs().item(),
            "input grad error": (x.grad - xs.grad).abs().max().item(),
            "router grad error": (model.router.weight.grad - moe.router.weight.grad).abs().max().item(),
            "received": seen[0] if seen else None,
            "dropped": int((~routing.keep).sum()), "choices": routing.keep.numel()}


@needs_exercises
def train_demo(rank, world_size, ep_size=2, steps=3):
    """EP groups of ep_size consecutive ranks, DP groups across; train_step against serial."""
    ex = current("experts")
    device = rank_device()
    eps = [dist.new_group(list(range(d * ep_size, (d + 1) * ep_size)))
           for d in range(world_size // ep_size)]
    dps = [dist.new_group(list(range(t, world_size, ep_size))) for t in range(ep_size)]
    t, d = rank % ep_size, rank // ep_size
    dp_group = dps[t] if world_size > ep_size else None
    serial = make_moe().double().to(device)
    model = ex.ExpertParallelMoE(serial, group=eps[d])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref = torch.optim.SGD(serial.parameters(), lr=0.1)
    losses = []
    for step in range(steps):
        xs = [tokens_of(q, seed=1000 * step).double().to(device) for q in range(world_size)]
        targets = [x.flip(1) for x in xs]
        loss = ex.train_step(model, opt, F.mse_loss, xs[rank], targets[rank], dp_group=dp_group)
        ref.zero_grad()
        total = 0
        for x, y in zip(xs, targets):
            out, aux = serial(x)
            total = total + (F.mse_loss(out, y) + 0.01 * aux) / world_size
        total.backward()
        ref.step()
        losses.append(loss.item())
    first = t * len(model.experts)
    diff = max((p - q).abs().max().item() for i, e in enumerate(model.experts)
               for p, q in zip(e.parameters(), serial.experts[first + i].parameters()))
    diff = max(diff, (model.router.weight - serial.router.weight).abs().max().item())
    return {"losses": losses, "weight difference": diff}
