"""Small usage patterns where NCCL and gloo differ, each labelled with what NCCL does.

Each pattern is a function (rank, world_size, device) -> a value, run on every rank. Its
label is NCCL's outcome (torch 2.9+, groups made with device_id, TORCH_NCCL_BLOCKING_WAIT=1,
as the checker runs them): "ok" (and the value every rank must return), "error" (an
exception, with a pattern its text shows) or "hang". tests/test_nccl_semantics.py runs them
on gloo under the checker's NCCL rules (runtime/nccl) and requires the same outcome;
scripts/gpu_proof.sh runs them on NCCL and records whether NCCL agrees.

The row of DESIGN.md's table each pattern holds is its `row`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Pattern:
    fn: object
    label: str             # ok | error | hang
    sizes: tuple = (2,)
    row: str = ""
    shows: str = ""        # for "error": what the exception says
    also: tuple = ()       # other outcomes NCCL has shown (each fails the code, as the label does)


def _ring(rank, n):
    return (rank + 1) % n, (rank - 1) % n


def batched_rotation(rank, n, device):
    nxt, prv = _ring(rank, n)
    out, into = torch.full((3,), float(rank), device=device), torch.empty(3, device=device)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, out, nxt),
                                    dist.P2POp(dist.irecv, into, prv)])
    for w in works:
        w.wait()
    return [len(works), into.tolist()]


def unpacked_batch(rank, n, device):
    nxt, prv = _ring(rank, n)
    out, into = torch.ones(2, device=device), torch.empty(2, device=device)
    send, recv = dist.batch_isend_irecv([dist.P2POp(dist.isend, out, nxt),
                                         dist.P2POp(dist.irecv, into, prv)])
    send.wait()
    recv.wait()
    return into.tolist()


def irecv_then_isend(rank, n, device):
    peer = 1 - rank
    into, out = torch.empty(2, device=device), torch.full((2,), float(rank), device=device)
    works = [dist.irecv(into, peer), dist.isend(out, peer)]
    for w in works:
        w.wait()
    return into.tolist()


def blocking_send_ring(rank, n, device):
    nxt, prv = _ring(rank, n)
    into = torch.empty(2, device=device)
    dist.send(torch.full((2,), float(rank), device=device), nxt)
    dist.recv(into, prv)
    return into.tolist()


def parity_ordered_ring(rank, n, device):
    nxt, prv = _ring(rank, n)
    out, into = torch.full((2,), float(rank), device=device), torch.empty(2, device=device)
    if rank % 2 == 0:
        works = [dist.isend(out, nxt), dist.irecv(into, prv)]
    else:
        works = [dist.irecv(into, prv), dist.isend(out, nxt)]
    for w in works:
        w.wait()
    return into.tolist()


def collective_across_a_receive(rank, n, device):
    t = torch.ones(1, device=device)
    if rank == 0:
        w = dist.isend(torch.ones(2, device=device), 1)
        dist.all_reduce(t)
        w.wait()
    else:
        dist.all_reduce(t)
        into = torch.empty(2, device=device)
        dist.irecv(into, 0).wait()
    return t.tolist()


def wait_twice(rank, n, device):
    nxt, prv = _ring(rank, n)
    into = torch.empty(1, device=device)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.ones(1, device=device), nxt),
                                    dist.P2POp(dist.irecv, into, prv)])
    for _ in range(2):
        for w in works:
            w.wait()
    return into.tolist()


def poll_without_wait(rank, n, device):
    nxt, prv = _ring(rank, n)
    into = torch.empty(1, device=device)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.ones(1, device=device), nxt),
                                    dist.P2POp(dist.irecv, into, prv)])
    while not all(w.is_completed() for w in works):
        pass
    if device.type == "cuda":
        torch.cuda.synchronize()
    return into.tolist()


def mismatched_tags(rank, n, device):
    peer = 1 - rank
    if rank == 0:
        dist.send(torch.ones(2, device=device), peer, tag=7)
        return []
    into = torch.empty(2, device=device)
    dist.recv(into, peer, tag=0)
    return into.tolist()


def receive_from_anyone(rank, n, device):
    # rank 0 sends nothing: on NCCL an unmatched send would hang rank 0 at its exit
    return dist.recv(torch.empty(1, device=device)) if rank == 1 else None


def monitored(rank, n, device):
    dist.monitored_barrier()
    return rank


def non_contiguous_all_reduce(rank, n, device):
    t = torch.ones(3, 4, device=device).t()
    dist.all_reduce(t)
    return t.sum().item()


def average(rank, n, device):
    t = torch.full((2,), float(rank), device=device)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    return t.tolist()


def bitwise_and(rank, n, device):
    t = torch.full((2,), 3, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.BAND)
    return t.tolist()


def uneven_all_gather(rank, n, device):
    mine = torch.full((rank + 1,), float(rank), device=device)
    outs = [torch.empty(r + 1, device=device) for r in range(n)]
    dist.all_gather(outs, mine)
    return [o.tolist() for o in outs]


def uneven_all_to_all(rank, n, device):
    """Rank r sends q + 1 copies of 10 r + q to rank q, so receives r + 1 from each rank."""
    ins = [torch.full((q + 1,), float(10 * rank + q), device=device) for q in range(n)]
    outs = [torch.empty(rank + 1, device=device) for _ in range(n)]
    dist.all_to_all(outs, ins)
    return [o.tolist() for o in outs]


def send_to_itself_in_a_batch(rank, n, device):
    out, into = torch.full((2,), float(rank), device=device), torch.empty(2, device=device)
    for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, out, rank),
                                     dist.P2POp(dist.irecv, into, rank)]):
        w.wait()
    return into.tolist()


PATTERNS = {
    "batched_rotation": Pattern(batched_rotation, "ok", (2, 3, 4), "one handle for a batch"),
    "unpacked_batch": Pattern(unpacked_batch, "error", (2,), "one handle for a batch",
                              "not enough values to unpack"),
    "irecv_then_isend": Pattern(irecv_then_isend, "hang", (2,), "stream order"),
    # 2 ranks sharing one GPU, NCCL 2.28.9: the send's connection set-up failed
    # (ncclInternalError) rather than blocking (docs/PERFORMANCE.md, the GPU proof run)
    "blocking_send_ring": Pattern(blocking_send_ring, "hang", (2, 3), "stream order",
                                  also=("error",)),
    "parity_ordered_ring": Pattern(parity_ordered_ring, "ok", (2, 4), "stream order"),
    "collective_across_a_receive": Pattern(collective_across_a_receive, "hang", (2,),
                                           "stream order"),
    "wait_twice": Pattern(wait_twice, "ok", (2, 3), "repeated waits"),
    "poll_without_wait": Pattern(poll_without_wait, "ok", (2,), "completion without wait"),
    "mismatched_tags": Pattern(mismatched_tags, "ok", (2,), "tags"),
    "receive_from_anyone": Pattern(receive_from_anyone, "error", (2,), "any-source receive",
                                   "recvAnysource|without a source"),
    "monitored_barrier": Pattern(monitored, "error", (2,), "gloo only",
                                 "GLOO|gloo only"),
    "non_contiguous_all_reduce": Pattern(non_contiguous_all_reduce, "error", (2,),
                                         "contiguity", "contiguous"),
    "average": Pattern(average, "ok", (2, 3), "ReduceOp.AVG"),
    "bitwise_and": Pattern(bitwise_and, "error", (2,), "bitwise reductions",
                           "BAND|bitwise"),
    "uneven_all_gather": Pattern(uneven_all_gather, "ok", (2, 3), "uneven all_gather"),
    "uneven_all_to_all": Pattern(uneven_all_to_all, "ok", (2, 3), "uneven all_to_all"),
    "send_to_itself_in_a_batch": Pattern(send_to_itself_in_a_batch, "ok", (1, 2),
                                         "send to itself"),
}

EXPECTED_VALUES = {
    "batched_rotation": lambda r, n: [1, [float((r - 1) % n)] * 3],
    "parity_ordered_ring": lambda r, n: [float((r - 1) % n)] * 2,
    "wait_twice": lambda r, n: [1.0],
    "poll_without_wait": lambda r, n: [1.0],
    "mismatched_tags": lambda r, n: [] if r == 0 else [1.0, 1.0],
    "average": lambda r, n: [sum(range(n)) / n] * 2,
    "uneven_all_gather": lambda r, n: [[float(q)] * (q + 1) for q in range(n)],
    "uneven_all_to_all": lambda r, n: [[float(10 * q + r)] * (r + 1) for q in range(n)],
    "send_to_itself_in_a_batch": lambda r, n: [float(r)] * 2,
}


def run(rank, world_size, name):
    """A launched rank: the pattern under the checker's NCCL rules (on CPU), and its program."""
    from rtp_course.runtime import commlog, launcher
    device = launcher.rank_device()
    commlog.install(code_dirs=[__file__])
    commlog.STATE.nccl_rules = device.type == "cpu"
    commlog.reset()
    try:
        value, outcome = PATTERNS[name].fn(rank, world_size, device), "ok"
    except Exception as e:  # noqa: BLE001 - what the pattern raised is its outcome
        value, outcome = f"{type(e).__name__}: {e}", "error"
    return {"outcome": outcome, "value": value, "program": commlog.program()}
