"""Notebook 03: Megatron's f and g (the student's `comm` module, E2) at work.

Workers (run with `launch` / `run_demo`):
* ``one_op``: forward and backward of one communication function on a tiny tensor.
* ``tp_mlp``: a two-layer MLP split column-then-row over the ranks, built by hand
  from f (duplicate) and g (all_reduce); compare with ``serial_mlp``.
"""
import torch
import torch.nn.functional as F

from rtp_course.course.impl import current
from rtp_course.runtime.launcher import rank_device


def one_op(rank, world_size, name):
    """Run comm.<name> forward and backward; return x, y, dL/dy and dL/dx of this rank.

    The loss is sum(y * c) with a weight c that differs per rank where y is
    per-rank (so the backward shows which ranks' gradients were combined).
    """
    comm, dev = current("comm"), rank_device()
    if name == "duplicate":           # x replicated; each rank's branch uses y differently
        x = torch.tensor([1.0, 2.0, 3.0], device=dev)
        run = comm.duplicate
        weight = lambda y: torch.full_like(y, float(rank + 1))      # noqa: E731
    elif name == "all_reduce":        # x_r: this rank's partial sum; y replicated
        x = torch.tensor([1.0, 2.0, 3.0], device=dev) * (rank + 1)
        run = comm.all_reduce
        weight = lambda y: torch.tensor([1.0, 10.0, 100.0], device=dev)  # noqa: E731
    elif name == "all_gather":        # x_r: rank r's 2 columns; y the whole row, replicated
        x = torch.tensor([1.0, 2.0], device=dev) + 10 * (rank + 1)
        run = lambda t: comm.all_gather(t, dim=-1)                   # noqa: E731
        weight = lambda y: torch.arange(1.0, y.numel() + 1, device=dev)  # noqa: E731
    elif name == "split":             # x replicated; y_r: rank r's 2 columns
        x = torch.arange(1.0, 2 * world_size + 1, device=dev)
        run = lambda t: comm.split(t, dim=-1)                        # noqa: E731
        weight = lambda y: torch.full_like(y, float(rank + 1))      # noqa: E731
    else:
        raise ValueError(f"unknown op {name!r}")
    x.requires_grad_(True)
    y = run(x)
    grad_y = weight(y)
    (y * grad_y).sum().backward()
    return {"x": x.detach(), "y": y.detach(), "dL/dy": grad_y, "dL/dx": x.grad}


def mlp_weights(d=8, hidden=16, seed=0):
    """Serial weights of the MLP y = W2 gelu(W1 x + b1) + b2, and an input batch x [4, d]."""
    gen = torch.Generator().manual_seed(seed)
    w = {"W1": torch.randn(hidden, d, generator=gen) / d ** 0.5, "b1": 0.1 * torch.randn(hidden, generator=gen),
         "W2": torch.randn(d, hidden, generator=gen) / hidden ** 0.5, "b2": 0.1 * torch.randn(d, generator=gen)}
    x = torch.randn(4, d, generator=gen)
    probe = torch.randn(4, d, generator=gen)       # loss = sum(y * probe): a fixed dL/dy
    return w, x, probe


def serial_mlp(seed=0):
    """Output and gradients of the whole MLP on one process: the reference."""
    w, x, probe = mlp_weights(seed=seed)
    params = {k: v.clone().requires_grad_(True) for k, v in w.items()}
    x = x.clone().requires_grad_(True)
    y = F.linear(F.gelu(F.linear(x, params["W1"], params["b1"])), params["W2"], params["b2"])
    (y * probe).sum().backward()
    return {"y": y.detach(), "dx": x.grad, **{f"d{k}": p.grad for k, p in params.items()}}


def tp_mlp(rank, world_size, seed=0, use_f=True):
    """The MLP split over the ranks: W1 by rows (column parallel), W2 by columns (row parallel).

        x  --f-->  x            (replicated; backward: all-reduce of dL/dx)
        h_r = gelu(x W1_r^T + b1_r)     [4, hidden/N]  this rank's slice of the hidden units
        z_r = h_r W2_r^T                [4, d]         a PARTIAL sum of the output
        y  = g(z_r) + b2                [4, d]         all-reduce; b2 added once, after the sum
    use_f=False leaves out f, to see what goes wrong.
    """
    comm, dev = current("comm"), rank_device()
    w, x, probe = mlp_weights(seed=seed)
    w, x, probe = {k: v.to(dev) for k, v in w.items()}, x.to(dev), probe.to(dev)
    n = w["W1"].shape[0] // world_size
    mine = slice(rank * n, (rank + 1) * n)
    W1 = w["W1"][mine].clone().requires_grad_(True)           # [hidden/N, d]
    b1 = w["b1"][mine].clone().requires_grad_(True)           # [hidden/N]
    W2 = w["W2"][:, mine].clone().requires_grad_(True)        # [d, hidden/N]
    b2 = w["b2"].clone().requires_grad_(True)                 # [d], replicated
    x = x.clone().requires_grad_(True)

    x_in = comm.duplicate(x) if use_f else x                  # f
    h = F.gelu(F.linear(x_in, W1, b1))
    y = comm.all_reduce(F.linear(h, W2)) + b2                 # g, then the bias
    (y * probe).sum().backward()
    return {"y": y.detach(), "dx": x.grad, "dW1": W1.grad, "db1": b1.grad, "dW2": W2.grad,
            "db2": b2.grad, "slice": (mine.start, mine.stop)}


def compare_mlp(results, reference) -> dict:
    """{rank: {tensor: max abs error}} of tp_mlp's per-rank results against serial_mlp's."""
    table = {}
    for rank, res in enumerate(results):
        lo, hi = res["slice"]
        expect = {"y": reference["y"], "dx": reference["dx"], "dW1": reference["dW1"][lo:hi],
                  "db1": reference["db1"][lo:hi], "dW2": reference["dW2"][:, lo:hi],
                  "db2": reference["db2"]}
        table[rank] = {k: (res[k] - v).abs().max().item() for k, v in expect.items()}
    return table
