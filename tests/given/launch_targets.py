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


if __name__ == "__main__":  # run by torchrun / srun in test_launcher.py
    from rtp_course.runtime.launcher import init_from_env
    rank, world, device = init_from_env()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    print(f"rank {rank}/{world} on {device}: sum {t.item():g}", flush=True)
    dist.destroy_process_group()
