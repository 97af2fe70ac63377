"""Receives into the caller's tensor to save memory (rotate mutates its input).

EXPECT: clockwise/input after the call max abs error.*never modify the caller's tensor
WORLD_SIZES: 2
ONLY: rotate

A wrong implementation: solutions/rotation.py with this one bug.
"""
import torch
import torch.distributed as dist

DIRECTIONS = ("clockwise", "counterclockwise")


def _global_rank(group, group_rank):
    return group_rank if group is None else dist.get_global_rank(group, group_rank)


def ring_peers(direction="clockwise", group=None):
    """(destination, source) of this rank for one rotation, as GLOBAL ranks."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'clockwise' or 'counterclockwise', got {direction!r}")
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    step = 1 if direction == "clockwise" else -1
    return _global_rank(group, (rank + step) % world), _global_rank(group, (rank - step) % world)


class RotationHandle:
    """An in-flight rotation: `wait()` returns the received tensor, `is_completed()` polls."""

    def __init__(self, works, received, sent):
        self._works = works
        self._received = received
        self._sent = sent  # keep the send buffer alive until the send has completed

    def is_completed(self):
        return all(w.is_completed() for w in self._works)

    def wait(self):
        for w in self._works:
            w.wait()
        self._works, self._sent = [], None  # never wait twice: gloo can block on a finished work
        return self._received


def rotate_async(tensor, direction="clockwise", group=None, recv_shape=None, recv_dtype=None):
    """Start one rotation of `tensor` and return a RotationHandle at once.

    recv_shape / recv_dtype: what this rank will RECEIVE (default: like `tensor`);
    ranks holding uneven shards pass the shape of the incoming shard.
    With one rank the handle is already completed and holds a clone.
    """
    dst, src = ring_peers(direction, group)
    if dist.get_world_size(group) == 1:
        return RotationHandle([], tensor.detach().clone(), None)
    sent = tensor.detach().clone()  # send a copy, and reuse the input's memory to receive
    received = tensor.detach() if recv_shape is None else torch.empty(
        tuple(recv_shape), dtype=recv_dtype or tensor.dtype, device=tensor.device)
    # Post the receive and the send together: a blocking send on every rank deadlocks.
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, sent, dst, group),
                                    dist.P2POp(dist.irecv, received, src, group)])
    return RotationHandle(works, received, sent)


def rotate(tensor, direction="clockwise", group=None, recv_shape=None, recv_dtype=None):
    """One rotation, blocking: returns the tensor received from the previous rank
    (clockwise) or the next rank (counterclockwise). Always a new tensor."""
    return rotate_async(tensor, direction, group, recv_shape, recv_dtype).wait()


def ring_all_gather(tensor, dim=0, group=None):
    """cat([x_0, ..., x_{N-1}], dim) on every rank, with N-1 clockwise rotations.

    After k rotations rank r holds x_{(r-k) % N}. Every rank's tensor must have
    the same shape.
    """
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    parts = [None] * world
    parts[rank] = current = tensor.detach()
    for k in range(1, world):
        current = rotate(current, "clockwise", group)
        parts[(rank - k) % world] = current
    return torch.cat(parts, dim=dim)


def ring_reduce_scatter(tensor, dim=0, group=None):
    """Rank r gets sum over ranks q of chunk r of x_q (x cut in N equal chunks along dim).

    A partial sum travels clockwise and every rank it visits adds its own chunk:
    rank r starts the sum of chunk (r-1) % N, so after N-1 rotations it holds
    the complete sum of chunk r.
    """
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if tensor.shape[dim] % world:
        raise ValueError(f"ring_reduce_scatter: size {tensor.shape[dim]} of dim {dim} is not "
                         f"divisible by the group size {world}")
    chunks = tensor.detach().chunk(world, dim=dim)
    partial = chunks[(rank - 1) % world].clone()
    for k in range(1, world):
        partial = rotate(partial, "clockwise", group) + chunks[(rank - 1 - k) % world]
    return partial
