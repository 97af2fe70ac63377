"""Notebook 02: data parallelism with the student's `data_parallel` module (E1).

Workers (run with `launch` / `run_demo`):
* ``gradient_demo``: each rank's local gradient, then what average_gradients made of it.
* ``wrap_demo``: ranks built with different seeds; DataParallel makes them start equal.
* ``train``: the MNIST CNN trained on synthetic digits, DistributedSampler + DataParallel.
* ``profile_step``: torch.profiler around a few DataParallel steps; a plain-data summary.
Serial helpers (run in the notebook's own process): ``train`` with parallel=False,
``tiny_problem``, ``lr_scaling_runs`` (a small MLP, SGD).
"""
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler

from rtp_course.training.data import DigitsDataset, rank_batch
from rtp_course.course.impl import current
from rtp_course.models import build_model
from rtp_course.runtime.launcher import rank_device


def tiny_problem(seed: int = 0, batch: int = 8, device=None):
    """A linear model and a global batch of `batch` samples, the same on every rank
    (on `device`: a rank's own, rank_device(); default the CPU)."""
    device = device or torch.device("cpu")
    gen = torch.Generator().manual_seed(seed)
    x, y = torch.randn(batch, 3, generator=gen), torch.randn(batch, 1, generator=gen)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Linear(3, 1)
    return model.to(device), x.to(device), y.to(device)


def gradient_demo(rank, world_size, seed=0):
    """Local gradient on this rank's chunk, then the result of average_gradients."""
    dp = current("data_parallel")
    model, x, y = tiny_problem(seed, device=rank_device())
    x, y = rank_batch((x, y), rank, world_size)
    F.mse_loss(model(x), y).backward()
    local = model.weight.grad.clone()
    dp.average_gradients(model)
    return {"local": local, "averaged": model.weight.grad.clone()}


def wrap_demo(rank, world_size):
    """Build the model with a different seed on each rank, wrap it, take one backward step."""
    dp = current("data_parallel")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(100 + rank)            # deliberately different on every rank
        model = nn.Linear(3, 1).to(rank_device())
    before = model.weight.detach().clone()
    model = dp.DataParallel(model)
    after = model.module.weight.detach().clone()
    _, x, y = tiny_problem(device=rank_device())
    x, y = rank_batch((x, y), rank, world_size)
    F.mse_loss(model(x), y).backward()           # no explicit call: the hooks average
    return {"before": before, "after": after, "grad": model.module.weight.grad.clone()}


def train(rank, world_size, steps=30, per_rank_batch=32, lr=1e-3, seed=0, parallel=True):
    """Train the tutorial's MNIST CNN with Adam; returns this rank's losses and (rank 0) weights.

    parallel=False runs serially in the calling process: call it as
    train(0, 1, steps, world_size * per_rank_batch, ..., parallel=False) for the
    serial twin of a world_size-rank run. The sampler then draws the SAME
    shuffled order, so serial step t sees exactly the union of the ranks' batches.
    """
    dataset = DigitsDataset(steps * per_rank_batch * world_size, seed=seed)
    dev = rank_device() if parallel else torch.device("cpu")
    model = build_model("cnn", seed=seed, tiny=True).to(dev)   # tiny: dropout off, runs comparable
    if parallel:
        model = current("data_parallel").DataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    # Each rank reads a disjoint 1/N of the shuffled indices; the shuffle is the same on all ranks.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(dataset, batch_size=per_rank_batch, sampler=sampler, drop_last=True)
    losses = []
    for images, labels in loader:
        optimizer.zero_grad()
        loss = F.nll_loss(model(images.to(dev)), labels.to(dev))
        loss.backward()                  # DataParallel's hooks all-reduce the gradients here
        optimizer.step()
        losses.append(loss.item())       # this rank's loss on its own chunk
    module = model.module if parallel else model
    weights = {k: v.detach().clone() for k, v in module.state_dict().items()} if rank == 0 else None
    return {"losses": losses, "weights": weights}


def profile_step(rank, world_size, steps=3, per_rank_batch=32):
    """Profile `steps` DataParallel training steps; return rank 0's summary as plain data."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")    # keep the profiler's own log lines out of the notebook
    from torch.profiler import ProfilerActivity, profile, record_function
    dp = current("data_parallel")
    dev = rank_device()
    model = dp.DataParallel(build_model("cnn", seed=0, tiny=True).to(dev))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    images, labels = DigitsDataset(per_rank_batch * world_size, seed=0)[:]
    images, labels = rank_batch((images.to(dev), labels.to(dev)), rank, world_size)

    def step():
        with record_function("forward"):
            loss = F.nll_loss(model(images), labels)
        with record_function("backward (with the all-reduces)"):
            loss.backward()
        with record_function("optimizer step"):
            optimizer.step()
            optimizer.zero_grad()

    step()                                   # warm-up: first calls allocate and initialise
    dist.barrier()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    rows = [{"name": e.key, "calls": e.count, "total_ms": e.cpu_time_total / 1e3,
             "self_ms": e.self_cpu_time_total / 1e3} for e in prof.key_averages()]
    rows.sort(key=lambda r: -r["total_ms"])
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"rows": rows, "steps": steps, "grad_bytes": grad_bytes,
            "num_params": sum(p.numel() for p in model.parameters()),
            "num_tensors": sum(1 for _ in model.parameters())} if rank == 0 else None


def profile_table(summary, names=None, limit=12) -> str:
    """A readable table of profile_step's rows (all rows, or those whose name contains one of `names`)."""
    rows = summary["rows"]
    if names:
        rows = [r for r in rows if any(n in r["name"] for n in names)]
    lines = [f"{'event':58} {'calls':>6} {'total ms':>9} {'self ms':>8}"]
    for r in rows[:limit]:
        lines.append(f"{r['name'][:58]:58} {r['calls']:6d} {r['total_ms']:9.2f} {r['self_ms']:8.2f}")
    return "\n".join(lines)


def small_mlp(seed=0):
    """784 -> 64 -> 10: small enough that several serial runs take a few seconds."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10),
                             nn.LogSoftmax(dim=1))


def lr_scaling_runs(configs, samples=3072, seed=0, eval_every=256):
    """Serial SGD runs, one per (label, batch, lr) in `configs`, over the same training samples.

    Returns {label: (samples seen, held-out loss)}: the loss on 512 fixed
    held-out digits, measured every `eval_every` training samples.
    """
    train_set = DigitsDataset(samples, seed=seed)
    held_out = DigitsDataset(512, seed=seed + 1)[:]
    out = {}
    for label, batch, lr in configs:
        model = small_mlp(seed)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        loader = DataLoader(train_set, batch_size=batch, shuffle=True, drop_last=True,
                            generator=torch.Generator().manual_seed(seed))
        seen, xs, ys = 0, [0], [_loss(model, held_out)]
        for images, labels in loader:
            optimizer.zero_grad()
            F.nll_loss(model(images), labels).backward()
            optimizer.step()
            seen += batch
            if seen % eval_every == 0:
                xs.append(seen)
                ys.append(_loss(model, held_out))
        out[label] = (xs, ys)
    return out


@torch.no_grad()
def _loss(model, data):
    images, labels = data
    return F.nll_loss(model(images), labels).item()
