"""Processes started by torchrun or srun: join their process group from the environment."""
from __future__ import annotations

import datetime
import os
import socket

import torch
import torch.distributed as dist

from rtp_course.runtime import devices
from rtp_course.runtime import rank as _rank
from rtp_course.runtime.backends import BACKENDS, LaunchError
from rtp_course.runtime.rank import device_for


def env_rank_info(env=os.environ) -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's or Slurm's variables."""
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0))
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", 0))
    raise LaunchError("no RANK/WORLD_SIZE (torchrun) or SLURM_PROCID/SLURM_NTASKS (srun) in the "
                      "environment: start this program with torchrun or srun, or use launch()")


def _slurm_master(env) -> tuple[str, str]:
    """First host of the allocation and a port derived from the job id (same on every task)."""
    import subprocess
    nodes = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "localhost"
    try:
        host = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True,
                              text=True, check=True).stdout.split()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        host = nodes.split(",")[0]
    port = 20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000
    return host, str(port)


def init_from_env(backend: str | None = None, timeout: float = 600.0) -> tuple[int, int, torch.device]:
    """Join the job's process group; returns (rank, world_size, device). Under srun each task
    may see only its own GPU: the local rank is mapped onto the visible devices."""
    rank, world_size, local_rank = env_rank_info()
    if "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = _slurm_master(os.environ)
    backend = backend or ("nccl" if devices.gpu_count() > 0 else "gloo")
    if backend not in BACKENDS:
        raise LaunchError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
    try:
        device = device_for(backend, local_rank)
    except RuntimeError as e:
        raise LaunchError(str(e)) from None
    kwargs = {}
    if device.type == "cuda":
        torch.cuda.set_device(device)
        kwargs["device_id"] = device
    dist.init_process_group(backend, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout), **kwargs)
    _rank._DEVICE = device
    return rank, world_size, device


def free_port() -> int:
    """A currently free TCP port (for tools that need a port number up front)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
