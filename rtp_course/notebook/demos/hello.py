"""Who am I? The first thing every distributed program asks.

As a worker for `launch`:    launch(hello.hello, 4)
As a script, one process per rank, started by a launcher:

    torchrun --standalone --nproc-per-node=4 -m rtp_course.notebook.demos.hello
    srun --ntasks=4 python -m rtp_course.notebook.demos.hello

Under torchrun or srun the processes already exist and their environment says
who they are (RANK/WORLD_SIZE/LOCAL_RANK, or SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID);
`init_from_env()` reads it and joins the process group.
"""
import os
import socket

import torch
import torch.distributed as dist


def hello(rank: int, world_size: int) -> dict:
    """What this rank knows about itself and the group; one all-reduce proves they can talk."""
    backend = dist.get_backend()
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    ones = torch.ones(1, device=device)
    dist.all_reduce(ones)                       # every rank adds its 1: the result is world_size
    return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "backend": backend,
            "device": str(device), "host": socket.gethostname(), "pid": os.getpid(),
            "all_reduce of ones": int(ones.item())}


def main() -> None:
    from rtp_course.runtime.launcher import init_from_env
    rank, world_size, device = init_from_env(timeout=60)
    info = hello(rank, world_size)
    launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else (
        "srun" if "SLURM_PROCID" in os.environ else "env")
    print(f"[{launcher}] rank {info['rank']} of {info['world_size']} on {info['host']} "
          f"(pid {info['pid']}, {info['backend']}, {info['device']}, "
          f"LOCAL_RANK={os.environ.get('LOCAL_RANK', os.environ.get('SLURM_LOCALID', '?'))}): "
          f"all_reduce of ones = {info['all_reduce of ones']}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
