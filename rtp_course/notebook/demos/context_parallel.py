"""Notebook 10: ring attention (the student's `context_parallel` module, E8) at work.

Workers (run with `launch` / `run_demo`):
* ``blocks_demo``: block_attention over two halves of the keys, merge_blocks of the two halves'
  results, next to softmax attention over all the keys; with small scores and with scores in
  the thousands (one rank: nothing is communicated).
* ``ring_demo``: ring_attention on every rank's own tokens (contiguous, or its zig-zag shard
  with causal=True) against F.scaled_dot_product_attention on the whole sequence, forward and
  backward; the point-to-point traffic and the most received bytes held at once.
* ``zigzag_demo``: zigzag_shard of the positions 0..S-1, and zigzag_unshard back.
* ``attention_timeline``: forward and backward of a larger ring attention under
  torch.profiler: compute, key/value rotations and gradient-accumulator rotations.
The whole q, k, v come from one seed on every rank (a demo's shortcut: in a real run each
rank only ever has its own tokens); each rank keeps its own tokens of them.
"""
import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F

from rtp_course.course.impl import current
from rtp_course.course.todo import needs_exercises
from rtp_course.notebook.trace import Trace, recording_rotations
from rtp_course.runtime import commlog
from rtp_course.runtime.launcher import rank_device


def positions(rank, world_size, length, causal):
    """Where rank `rank`'s `length` tokens sit in the sequence: zig-zag chunks rank and
    2N-1-rank for causal attention, a contiguous piece otherwise."""
    if not causal:
        return list(range(rank * length, (rank + 1) * length))
    c = length // 2
    return (list(range(rank * c, (rank + 1) * c))
            + list(range((2 * world_size - 1 - rank) * c, (2 * world_size - rank) * c)))


def _whole(seed, shape, device):
    """q, k, v of the whole sequence and an upstream gradient, the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g).to(device) for _ in range(4)]


@needs_exercises
def blocks_demo(rank, world_size, scale=1.0):
    """block_attention on keys [0, 3) and [3, 7), merged, against attention over all 7 keys."""
    cp = current("context_parallel")
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 1, 4, 8, generator=g) * scale
    k, v = torch.randn(1, 1, 7, 8, generator=g), torch.randn(1, 1, 7, 8, generator=g)
    a, b = cp.block_attention(q, k[..., :3, :], v[..., :3, :]), cp.block_attention(
        q, k[..., 3:, :], v[..., 3:, :])
    out, lse = cp.merge_blocks(*a, *b)
    scores = q @ k.transpose(-2, -1) / 8 ** 0.5
    return {"lse_a": a[1].flatten().tolist(), "lse_b": b[1].flatten().tolist(),
            "lse": lse.flatten().tolist(), "serial_lse": torch.logsumexp(scores, -1).flatten().tolist(),
            "error": (out - F.scaled_dot_product_attention(q, k, v)).abs().max().item(),
            "max_score": scores.max().item()}


def _count(events):
    counts = {}
    for e in events:
        counts[e.kind] = counts.get(e.kind, 0) + 1
    return counts


@needs_exercises
def ring_demo(rank, world_size, causal=False, length=4, heads=2, head_dim=8, backward=True):
    """ring_attention of this rank's tokens against serial attention; with `backward`, the
    gradients of this rank's q, k, v too. Returns errors, p2p calls per phase, the received
    bytes (in all, and the most held at once) and the bytes of one block of k and v."""
    cp = current("context_parallel")
    commlog.install()
    dev = rank_device()
    q, k, v, up = _whole(0, (1, heads, world_size * length, head_dim), dev)
    where = torch.tensor(positions(rank, world_size, length, causal), device=dev)
    if causal:     # the student's own sharding, checked against the layout
        mine = [cp.zigzag_shard(t, 2) for t in (q, k, v)]
        layout_ok = all(torch.equal(m, t.index_select(2, where)) for m, t in zip(mine, (q, k, v)))
    else:
        mine, layout_ok = [t.index_select(2, where) for t in (q, k, v)], True
    mine = [t.clone().requires_grad_(backward) for t in mine]
    serial = [t.clone().requires_grad_(backward) for t in (q, k, v)]
    expected = F.scaled_dot_product_attention(*serial, is_causal=causal)
    comm, peaks = {}, {}
    commlog.reset("forward")
    base = commlog.STATE.live_recv
    out = cp.ring_attention(*mine, causal=causal)
    comm["forward"] = commlog.events()
    peaks["forward"] = commlog.STATE.peak_recv.get("forward", base) - base
    errors = {"output": (out.detach() - expected.detach().index_select(2, where)).abs().max().item()}
    if backward:
        (expected * up).sum().backward()
        commlog.reset("backward")
        (out * up.index_select(2, where)).sum().backward()
        comm["backward"] = commlog.events()
        peaks["backward"] = commlog.STATE.peak_recv.get("backward", base) - base
        for name, t, s in zip("qkv", mine, serial):
            errors[f"grad {name}"] = (t.grad - s.grad.index_select(2, where)).abs().max().item()
    return {"errors": errors, "layout_ok": layout_ok,
            "comm": {p: _count(e) for p, e in comm.items()},
            "received": {p: sum(e.nbytes for e in es if e.kind in ("recv", "irecv"))
                         for p, es in comm.items()},
            "peak_recv": peaks, "block_bytes": 2 * mine[1].numel() * mine[1].element_size()}


def describe(results) -> str:
    """ring_demo's per-rank results as a few readable lines."""
    names = list(results[0]["errors"])
    lines = [f"{'':>12}" + "".join(f"{f'rank {r}':>10}" for r in range(len(results))),
             *(f"{name:>12}" + "".join(f"{res['errors'][name]:10.1e}" for res in results)
               for name in names)]
    if not all(res["layout_ok"] for res in results):
        lines.append("zigzag_shard did not give the zig-zag layout on every rank")
    block = results[0]["block_bytes"]
    for phase, calls in results[0]["comm"].items():
        said = ", ".join(f"{n} x {k}" for k, n in calls.items()) or "none"
        lines.append(f"rank 0, {phase}: {said}; received {results[0]['received'][phase]} bytes "
                     f"= {results[0]['received'][phase] / block:g} blocks of k and v, at most "
                     f"{results[0]['peak_recv'][phase] / block:g} blocks held at once")
    return "\n".join(lines)


@needs_exercises
def zigzag_demo(rank, world_size, chunk=2):
    """zigzag_shard of the positions 0..2N*chunk-1, and zigzag_unshard of the shards."""
    cp = current("context_parallel")
    tokens = torch.arange(2 * world_size * chunk, device=rank_device())
    mine = cp.zigzag_shard(tokens, 0)
    return {"positions": mine.tolist(), "unsharded": cp.zigzag_unshard(mine, 0).tolist()}


@contextlib.contextmanager
def _recording(cp, rot, trace, label, kind_of):
    """Time every rotation the student's ring attention starts, whichever name it calls
    rotate_async by (the stub imports it into context_parallel; `rotation.rotate_async` works
    too): one recorder, both names pointing at it."""
    target = cp if hasattr(cp, "rotate_async") else rot
    with recording_rotations(target, trace, label, kind_of) as recorder:
        saved = rot.rotate_async
        rot.rotate_async = target.rotate_async
        try:
            yield recorder
        finally:
            rot.rotate_async = saved


@needs_exercises
def attention_timeline(rank, world_size, length=512, heads=4, head_dim=64, causal=True):
    """Forward and backward of ring attention on `length` tokens a rank (float32) under
    torch.profiler, each rotation timed and named by what it carries: a block of k and v
    (its values are the sequence's own, bit for bit) or a gradient accumulator.
    Returns {"forward": intervals, "backward": intervals, "events": the trace events}."""
    cp, rot = current("context_parallel"), current("rotation")
    dev = rank_device()
    q, k, v, up = _whole(2, (1, heads, world_size * length, head_dim), dev)
    values = torch.cat([k.flatten(), v.flatten()]).sort().values
    where = torch.tensor(positions(rank, world_size, length, causal), device=dev)
    mine = [t.index_select(2, where).requires_grad_(True) for t in (q, k, v)]
    up = up.index_select(2, where)

    def kind_of(tensor):
        probe = tensor.detach().flatten()[:16].to(values.device, values.dtype)
        at = torch.searchsorted(values, probe).clamp(max=values.numel() - 1)
        return "weight rotation" if bool((values[at] == probe).all()) else "accumulator rotation"

    (cp.ring_attention(*mine, causal=causal) * up).sum().backward()      # warm-up
    for t in mine:
        t.grad = None
    with Trace() as tr:
        dist.barrier()
        tr.restart()
        with _recording(cp, rot, tr, "forward", kind_of):
            out = cp.ring_attention(*mine, causal=causal)
        start = tr.now()
        with _recording(cp, rot, tr, "backward", kind_of):
            (out * up).sum().backward()
    intervals = tr.intervals()
    return {"forward": [i for i in intervals if i.start < start],
            "backward": [i for i in intervals if i.start >= start], "events": tr.events()}
