"""Worker functions for the launcher tests (spawn needs them importable)."""
import os
import time

import torch
import torch.distributed as dist


def rank_and_sum(rank, world_size):
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    return {"rank": rank, "world": world_size, "sum": t.item(), "pid": os.getpid()}


def raise_on_rank(rank, world_size, bad_rank):
    if rank == bad_rank:
        raise ValueError(f"boom on rank {rank}")
    t = torch.zeros(1)
    dist.all_reduce(t)  # the others wait here until they are ended
    return rank


def skip_collective(rank, world_size, pid_dir=None):
    if pid_dir:
        open(os.path.join(pid_dir, f"{rank}.pid"), "w").write(str(os.getpid()))
    if rank != 0:
        t = torch.zeros(1)
        dist.all_reduce(t)  # rank 0 never joins: a deadlock
    else:
        time.sleep(3600)
    return rank


def first_done_waits(rank, world_size):
    """Rank 0 returns at once; rank 1, a second later, says whether rank 0's process is still
    there (ranks leave together: a peer may still be using the sockets of a finished rank)."""
    t = torch.tensor([os.getpid()])
    dist.broadcast(t, 0)
    if rank == 0:
        return True
    time.sleep(1.0)
    try:
        with open(f"/proc/{int(t.item())}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def done_while_a_peer_hangs(rank, world_size):
    """Rank 0 returns at once; rank 1 waits in a collective rank 0 never joins."""
    if rank != 0:
        dist.all_reduce(torch.zeros(1))
    return rank


if __name__ == "__main__":  # run by torchrun / srun in test_launcher.py
    from rtp_course.runtime.launcher import init_from_env
    rank, world, device = init_from_env()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    print(f"rank {rank}/{world} on {device}: sum {t.item():g}", flush=True)
    dist.destroy_process_group()


def traced_rotation(rank, world_size):
    """One profiled ring step: post a send/recv, compute, wait (rtp_course.notebook.trace)."""
    from rtp_course.notebook.trace import Trace
    x = torch.randn(256, 256)
    with Trace() as tr:
        dist.barrier()
        tr.restart()
        sent, received = torch.full((1 << 18,), float(rank)), torch.empty(1 << 18)
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, sent, (rank + 1) % world_size),
                                        dist.P2POp(dist.irecv, received, (rank - 1) % world_size)])
        handle = tr.rotation(works[-1], "shard")
        with tr.span("compute", "shard"):
            for _ in range(5):
                x = x @ x.T / 256
        tr.wait(handle, "shard")
        works[0].wait()
    return {"intervals": [tuple(i) for i in tr.intervals()], "events": tr.events()}


def draw_own_inputs(rank, world_size, check_id):
    """A checker rank's view of its inputs: it holds no key, and asks the parent for its own."""
    from rtp_course.checker import channel, inputs
    from rtp_course.checker.common import randn
    from rtp_course.runtime.launcher import own_channel
    channel.connect(own_channel())
    inputs.enter_rank(rank, channel.ask)
    inputs.enter_check(check_id, 0)
    out = {"mine": randn(5, 3, owner=rank), "shared": randn(5, 3),
           "pair": randn(6, 3, owner=(1, 0))}
    for what, fn in (("other", lambda: randn(6, 3, owner=1 - rank)),
                     ("key", lambda: inputs.owner_key(rank)),
                     ("seed", lambda: inputs.seed(5, owner=rank))):
        try:
            fn()
            out[what] = "drawn"
        except inputs.NotYourInput as e:
            out[what] = str(e)
    return out
