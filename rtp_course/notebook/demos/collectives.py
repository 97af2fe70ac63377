"""Each collective on tiny tensors: what every rank holds before and after (notebook 01).

Rank r's own values are 10*(r+1) + i (rank 0: 10, 11, ...; rank 1: 20, 21, ...),
so in the pictures a number tells where it came from. Every demo returns
(before, after) for its rank. They all use the default group (the world).

    results = launch(run_all, 4)          # {name: (before, after)} per rank
    before, after = states(results, "all_reduce")
"""
import torch
import torch.distributed as dist

from rtp_course.runtime.launcher import rank_device   # the rank's GPU under NCCL, else the CPU


def own_values(rank: int, n: int) -> torch.Tensor:
    """n values that say which rank they belong to: 10*(rank+1) + [0, 1, ..., n-1]."""
    return torch.arange(n, dtype=torch.float32, device=rank_device()) + 10 * (rank + 1)


def broadcast(rank, world_size):
    """Rank 0's tensor is copied into every rank's tensor (same shape everywhere)."""
    t = own_values(0, 4) if rank == 0 else torch.zeros(4, device=rank_device())   # receivers pass a buffer to fill
    before = t.clone()
    dist.broadcast(t, src=0)
    return before, t


def all_reduce(rank, world_size):
    """Every rank ends with the element-wise sum of all ranks' tensors (in place)."""
    t = own_values(rank, 4)
    before = t.clone()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return before, t


def reduce_scatter(rank, world_size):
    """Sum as all_reduce does, but rank r keeps only chunk r of the sum: 1/N of the result each."""
    t = own_values(rank, 2 * world_size)               # N chunks of 2 values
    out = torch.zeros(2, device=rank_device())
    dist.reduce_scatter_tensor(out, t, op=dist.ReduceOp.SUM)   # gloo lacks the list form before 2.13
    return t, out


def all_gather(rank, world_size):
    """Every rank ends with every rank's tensor, in rank order."""
    t = own_values(rank, 2)
    parts = [torch.zeros(2, device=rank_device()) for _ in range(world_size)]
    dist.all_gather(parts, t)
    return t, torch.cat(parts)


def send_recv(rank, world_size):
    """Point to point: even rank r sends to r+1, which receives. Both sides must make the call."""
    t = own_values(rank, 2)
    before = t.clone()
    if rank % 2 == 0 and rank + 1 < world_size:
        dist.send(t, dst=rank + 1)
    elif rank % 2 == 1:
        dist.recv(t, src=rank - 1)                      # overwrites t with what arrived
    return before, t


def all_to_all(rank, world_size):
    """Rank r sends its chunk j to rank j and receives chunk r of every rank: a transpose."""
    t = own_values(rank, world_size)                   # one value per destination
    out = [torch.zeros(1, device=rank_device()) for _ in range(world_size)]
    chunks = list(t.chunk(world_size))
    try:
        dist.all_to_all(out, chunks)
    except RuntimeError as e:            # gloo before torch 2.13 has no alltoall: the same
        if "does not support" not in str(e):   # exchange, as point-to-point messages
            raise
        ops = [dist.P2POp(op, buf, peer) for peer in range(world_size) if peer != rank
               for op, buf in ((dist.isend, chunks[peer]), (dist.irecv, out[peer]))]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        out[rank].copy_(chunks[rank])
    return t, torch.cat(out)


DEMOS = {"broadcast": broadcast, "all_reduce": all_reduce, "reduce_scatter": reduce_scatter,
         "all_gather": all_gather, "send_recv": send_recv, "all_to_all": all_to_all}


def run_all(rank, world_size, names=tuple(DEMOS)):
    """All demos in one launch (starting processes costs seconds; collectives cost microseconds)."""
    return {name: DEMOS[name](rank, world_size) for name in names}


def states(results, name):
    """({rank: before}, {rank: after}) of demo `name` from run_all's per-rank results."""
    return ({r: res[name][0] for r, res in enumerate(results)},
            {r: res[name][1] for r, res in enumerate(results)})


def deadlock(rank, world_size):
    """Both ranks first wait to receive from the other: neither ever sends. Forever."""
    t = torch.zeros(1, device=rank_device())
    peer = 1 - rank
    dist.recv(t, src=peer)       # blocks until the peer sends... which it never does
    dist.send(t, dst=peer)
    return t


def no_deadlock(rank, world_size):
    """The fix: the two sides agree on an order. Rank 0 sends first, rank 1 receives first."""
    t = own_values(rank, 1)
    got = torch.zeros(1, device=rank_device())
    peer = 1 - rank
    if rank == 0:
        dist.send(t, dst=peer)
        dist.recv(got, src=peer)
    else:
        dist.recv(got, src=peer)
        dist.send(t, dst=peer)
    return got
