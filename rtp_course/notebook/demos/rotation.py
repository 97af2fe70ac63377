"""Notebook 05: the rotation primitive (the student's `rotation` module, E4) at work.

Workers (run with `launch` / `run_demo`):
* ``peers``: ring_peers of every rank, both directions.
* ``one_rotation``: what each rank holds before and after rotate(direction).
* ``async_probe``: rotate_async returns before the data has arrived (rank 0 starts late, so
  rank 1's cannot have); wait() delivers it.
* ``all_gather_steps``: what every rank holds after each of the N-1 rotations, and
  ring_all_gather's result next to dist.all_gather's.
* ``reduce_scatter_demo``: ring_reduce_scatter next to the true sums.
* ``overlap_run``: N steps of "compute with the shard in hand, rotate it on", with the
  rotation overlapped with the compute and without; returns the profiled timelines of both.
Rank r's small tensors hold 10*(r+1) + i, so a value says where it came from.
"""
import time

import torch
import torch.distributed as dist

from rtp_course.course.todo import needs_exercises
from rtp_course.course.impl import current
from rtp_course.notebook.trace import Trace
from rtp_course.runtime.launcher import rank_device


def _device():
    """This rank's device: its GPU under NCCL (mapped onto the visible ones), else the CPU."""
    return rank_device()


def own_values(rank, n=2):
    return torch.arange(n, dtype=torch.float32, device=_device()) + 10 * (rank + 1)


@needs_exercises
def one_rotation(rank, world_size, direction="clockwise"):
    """(before, after, (destination, source)) of this rank for one rotation."""
    rot = current("rotation")
    before = own_values(rank)
    after = rot.rotate(before, direction)
    return before.cpu(), after.cpu(), rot.ring_peers(direction)


HOLD_S = 0.2        # how late rank 0 starts its rotation in async_probe


@needs_exercises
def async_probe(rank, world_size, megabytes=8.0, hold_s=HOLD_S):
    """rotate_async of a large tensor while rank 0 starts `hold_s` late: rank 1's source has not
    sent when rank 1's call returns, so a handle already completed then means the call waited,
    whatever the link's speed (an NVLink copy takes microseconds: timing a transfer on its own
    tells nothing). A first rotation, untimed, connects the ring: NCCL connects a pair at its
    first transfer and blocks the host until the peer takes part. "arrived after" is when the
    received tensor is there: on a GPU, NCCL's wait() returns at once (it only makes the compute
    stream wait), so the stream is synchronized first."""
    rot = current("rotation")
    x = torch.full((int(megabytes * 2 ** 20 / 4),), float(rank), device=_device())
    rot.rotate(x, "clockwise")                    # connects the ring: setup paid outside the timing
    dist.barrier()
    if rank == 0:
        time.sleep(hold_s)
    t0 = time.perf_counter()
    handle = rot.rotate_async(x, "clockwise")
    returned = time.perf_counter() - t0
    done_at_return = handle.is_completed()
    received = _arrived(handle.wait())
    arrived = time.perf_counter() - t0
    return {"returned_after_ms": 1e3 * returned, "done_when_returned": done_at_return,
            "arrived_after_ms": 1e3 * arrived, "done_after_wait": handle.is_completed(),
            "received_from": int(received[0].item()), "again": handle.wait() is received,
            "late_ms": 1e3 * hold_s if rank == 0 else 0.0, "source": (rank - 1) % world_size}


@needs_exercises
def all_gather_steps(rank, world_size):
    """This rank's tensor after each clockwise rotation, and the gathered results."""
    rot = current("rotation")
    mine = own_values(rank)
    held, steps = mine, [mine.cpu()]
    for _ in range(world_size - 1):
        held = rot.rotate(held, "clockwise")
        steps.append(held.cpu())
    ring = rot.ring_all_gather(mine)
    parts = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(parts, mine)
    return {"steps": steps, "ring": ring.cpu(), "expected": torch.cat(parts).cpu()}


@needs_exercises
def reduce_scatter_demo(rank, world_size):
    """ring_reduce_scatter of a tensor of N chunks of 2 values, and the true chunk sums."""
    rot = current("rotation")
    mine = own_values(rank, 2 * world_size)
    out = rot.ring_reduce_scatter(mine)
    total = mine.clone()
    dist.all_reduce(total)
    return {"input": mine.cpu(), "output": out.cpu(),
            "expected": total.chunk(world_size)[rank].cpu()}


@needs_exercises
def overlap_run(rank, world_size, rows=512, cols=1024, batch=64, repeats=None, passes=3):
    """RTP's forward loop without the model: for i in 0..N-1, compute with the shard in hand
    (`repeats` times x @ shard^T) and rotate the shard clockwise (N-1 rotations), in two ways:

    "sequential": compute, then rotate_async and wait at once: compute and transfer add up.
    "overlapped": rotate_async first, compute, then wait: the transfer hides behind compute.

    A shard is [rows, cols] float32 (2 MiB by default); x is [batch, cols]. repeats=None
    measures one rotation and one product first and picks repeats so that computing takes
    about as long as a transfer (where overlap matters most), the same on every rank.
    The two ways alternate for `passes` passes each; for each way we keep the fastest pass
    (a pass lasts as long as its slowest rank): the least disturbed by the rest of the machine.
    Returns {"repeats": repeats, "sequential": pass, "overlapped": pass}, a pass being
    {"intervals": [Interval], "events": this rank's torch.profiler trace events}.
    """
    rot = current("rotation")
    dev = _device()
    gen = torch.Generator().manual_seed(rank)
    shard = torch.randn(rows, cols, generator=gen).to(dev)
    x = torch.randn(batch, cols, generator=gen).to(dev)
    if repeats is None:
        repeats = _balanced_repeats(rot, shard, x)
    out = {"repeats": repeats}
    runs = {"sequential": [], "overlapped": []}
    for _ in range(passes):
        for way in runs:
            runs[way].append(_one_pass(rot, shard, x, repeats, way == "overlapped"))
    for way, passes_of_way in runs.items():
        lengths = torch.tensor([length for length, _ in passes_of_way], dtype=torch.float64,
                               device=dev)
        dist.all_reduce(lengths, op=dist.ReduceOp.MAX)
        out[way] = passes_of_way[int(lengths.argmin().item())][1]
    return out


def _one_pass(rot, shard, x, repeats, overlap):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    with Trace() as tr:                          # torch.profiler on this rank
        dist.barrier()
        tr.restart()
        for i in range(world_size):
            s = (rank - i) % world_size               # the shard in hand
            handle = None
            if overlap and i < world_size - 1:       # start the transfer BEFORE computing
                handle = tr.rotation(rot.rotate_async(shard, "clockwise"), f"shard {s}")
            with tr.span("compute", f"shard {s}"):
                for _ in range(repeats):
                    _matmul(x, shard)
            if not overlap and i < world_size - 1:   # only now: nothing left to hide it behind
                handle = tr.rotation(rot.rotate_async(shard, "clockwise"), f"shard {s}")
            if handle is not None:
                shard = tr.wait(handle, f"shard {s}")
        length = tr.now()
    return length, {"intervals": tr.intervals(), "events": tr.events()}


def _balanced_repeats(rot, shard, x, trials=3):
    """How many products x @ shard^T take as long as one rotation of `shard` (max over ranks)."""
    rot.rotate(shard, "clockwise")                # warm-up: connections, allocator
    _matmul(x, shard)
    transfer = compute = float("inf")
    for _ in range(trials):
        dist.barrier()
        t = time.perf_counter()
        _arrived(rot.rotate(shard, "clockwise"))
        transfer = min(transfer, time.perf_counter() - t)
        t = time.perf_counter()
        _matmul(x, shard)
        compute = min(compute, time.perf_counter() - t)
    need = torch.tensor([float(max(1, round(transfer / compute)))], device=shard.device)
    dist.all_reduce(need, op=dist.ReduceOp.MAX)
    return int(min(need.item(), 200))


def _arrived(t):
    """`t` once it is there: NCCL's wait() returns before the transfer is done on a GPU."""
    if t.is_cuda:
        torch.cuda.current_stream().synchronize()
    return t


def _matmul(x, shard):
    y = x @ shard.T
    if y.is_cuda:      # time the kernel, not its launch; only the compute stream (NCCL has its own)
        torch.cuda.current_stream().synchronize()
    return y


@needs_exercises
def peers(rank, world_size):
    """ring_peers for both directions: {direction: (destination, source)}."""
    rot = current("rotation")
    return {d: rot.ring_peers(d) for d in ("clockwise", "counterclockwise")}
